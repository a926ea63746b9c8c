// BatchLoader: seeded epoch permutations of the sample windows, sliced per (dp, sp) rank.
#include "wallfacer/data/loader.h"

#include <algorithm>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/data/packing.h"

namespace wf::data {
namespace {

void check_options(const LoaderOptions& o) {
  WF_CHECK(o.seq_len >= 1, "BatchLoader: seq_len is {}; it must be at least 1 (train.seq_len)", o.seq_len);
  // micro_batch_size, grad_accum_steps and the dp slice: SampleOrder checks them.
  WF_CHECK(o.shard.seq_len == o.seq_len,
           "BatchLoader: the sp shard is for sequences of {} tokens but seq_len is {}; build the shard "
           "(parallel::sp_shard) with the same sequence length",
           o.shard.seq_len, o.seq_len);
  parallel::check_sequence_length(o.shard.layout, o.seq_len, o.shard.P, o.shard.C, o.shard.U);
  WF_CHECK(o.shard.logical_index >= 0 && o.shard.logical_index < o.shard.P,
           "BatchLoader: sp logical index {} is not a rank of an sp group of {}", o.shard.logical_index, o.shard.P);
}

}  // namespace

SampleOrderOptions sample_order_options(const LoaderOptions& o, std::int64_t samples_per_epoch) {
  return {.samples_per_epoch = samples_per_epoch,
          .micro_batch_size = o.micro_batch_size,
          .grad_accum_steps = o.grad_accum_steps,
          .dp_size = o.dp_size,
          .dp_rank = o.dp_rank,
          .seed = o.seed,
          .shuffle = o.shuffle};
}

BatchLoader::BatchLoader(std::shared_ptr<TokenSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  WF_CHECK(source_ != nullptr, "BatchLoader: no token source");
  check_options(options_);
  const std::int64_t N = options_.seq_len;
  samples_per_epoch_ = source_->size() > 0 ? (source_->size() - 1) / N : 0;
  WF_CHECK(samples_per_epoch_ > 0,
           "BatchLoader: {} holds {} tokens, too few for one sequence of seq_len {} (it needs at least {} tokens: "
           "{} inputs and the next token as the last target); use a shorter train.seq_len or more data",
           source_->describe(), source_->size(), N, N + 1, N);
  order_ = std::make_unique<SampleOrder>(sample_order_options(options_, samples_per_epoch_));
  runs_ = options_.shard.runs();
  positions_ = parallel::run_positions(runs_);
  if (options_.pack) {
    documents_ = source_->documents();
    WF_CHECK(documents_ != nullptr && documents_->token_count == source_->size(),
             "BatchLoader: the document index of {} is for {} tokens, but the source holds {}", source_->describe(),
             documents_ ? documents_->token_count : 0, source_->size());
  }
}

BatchLoader::~BatchLoader() = default;
BatchLoader::BatchLoader(BatchLoader&&) noexcept = default;
BatchLoader& BatchLoader::operator=(BatchLoader&&) noexcept = default;

std::int64_t BatchLoader::global_batch_size() const { return order_->global_batch_size(); }
std::int64_t BatchLoader::samples_per_epoch() const { return samples_per_epoch_; }
std::int64_t BatchLoader::epoch(std::int64_t step) const { return order_->epoch(step); }
std::int64_t BatchLoader::stream_index(std::int64_t step, std::int64_t micro, std::int64_t b) const {
  return order_->stream_index(step, micro, b);
}
std::int64_t BatchLoader::sample_at(std::int64_t index) const { return order_->sample_at(index); }

Batch BatchLoader::get(std::int64_t step, std::int64_t micro) const {
  const std::int64_t N = options_.seq_len;
  const std::int64_t B = options_.micro_batch_size;
  Batch batch;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t sample = sample_at(stream_index(step, micro, b));
    batch.samples.push_back(sample);
    batch.doc_bounds.push_back(documents_ ? window_document_bounds(*documents_, sample * N, N)
                                          : std::vector<std::int64_t>{0, N});
  }
  // A packed batch is laid out by its documents' work (sequence_layout.h, document_chunks), as the
  // attention strategies lay it out from the same bounds; otherwise the layout is fixed.
  std::vector<parallel::TokenRun> packed_runs;
  std::vector<std::int64_t> packed_positions;
  if (documents_) {
    packed_runs = options_.shard.for_documents(batch.doc_bounds).runs();
    packed_positions = parallel::run_positions(packed_runs);
  }
  const std::vector<parallel::TokenRun>& runs = documents_ ? packed_runs : runs_;
  const std::vector<std::int64_t>& positions = documents_ ? packed_positions : positions_;
  const auto n_local = static_cast<std::int64_t>(positions.size());
  batch.inputs = Tensor::empty({B, n_local}, DType::i64);
  batch.targets = Tensor::empty({B, n_local}, DType::i64);
  batch.positions = Tensor::from_vector(positions, {n_local});
  batch.global_tokens = global_batch_size() * N;  // every position of a window has a target
  batch.doc_positions = Tensor::empty({B, n_local}, DType::i64);
  std::int64_t* inputs = batch.inputs.data<std::int64_t>();
  std::int64_t* targets = batch.targets.data<std::int64_t>();
  std::int64_t* doc_positions = batch.doc_positions.data<std::int64_t>();
  std::vector<std::int64_t> window;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t sample = batch.samples[static_cast<std::size_t>(b)];
    document_positions(batch.doc_bounds[static_cast<std::size_t>(b)], positions, doc_positions + b * n_local);
    // Only this rank's runs are read, each with the one token after it for the last target:
    // a rank touches N/P + (runs) tokens of a sequence, not N.
    std::int64_t column = b * n_local;
    for (const parallel::TokenRun& run : runs) {
      window.resize(static_cast<std::size_t>(run.length + 1));
      source_->read(sample * N + run.start, run.length + 1, window.data());
      std::copy(window.begin(), window.end() - 1, inputs + column);
      std::copy(window.begin() + 1, window.end(), targets + column);
      column += run.length;
    }
  }
  return batch;
}

}  // namespace wf::data
