// BatchLoader: seeded epoch permutations of the sample windows, sliced per (dp, sp) rank.
#include "wallfacer/data/loader.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit stream that is fully specified here, so the
// permutations are the same with every compiler and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return mix(state_ += 0x9e3779b97f4a7c15ull); }
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n ≥ 1, without bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t state_;
};

void check_options(const LoaderOptions& o) {
  WF_CHECK(o.seq_len >= 1, "BatchLoader: seq_len is {}; it must be at least 1 (train.seq_len)", o.seq_len);
  WF_CHECK(o.micro_batch_size >= 1, "BatchLoader: micro_batch_size is {}; it must be at least 1 (train.micro_batch_size)",
           o.micro_batch_size);
  WF_CHECK(o.grad_accum_steps >= 1, "BatchLoader: grad_accum_steps is {}; it must be at least 1", o.grad_accum_steps);
  WF_CHECK(o.dp_size >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_size,
           "BatchLoader: dp_rank {} is not a rank of a data-parallel group of {}", o.dp_rank, o.dp_size);
  WF_CHECK(o.shard.seq_len == o.seq_len,
           "BatchLoader: the sp shard is for sequences of {} tokens but seq_len is {}; build the shard "
           "(parallel::sp_shard) with the same sequence length",
           o.shard.seq_len, o.seq_len);
  parallel::check_sequence_length(o.shard.layout, o.seq_len, o.shard.P, o.shard.C);
  WF_CHECK(o.shard.logical_index >= 0 && o.shard.logical_index < o.shard.P,
           "BatchLoader: sp logical index {} is not a rank of an sp group of {}", o.shard.logical_index, o.shard.P);
}

}  // namespace

struct BatchLoader::PermutationCache {
  struct Entry {
    std::int64_t epoch = -1;
    std::shared_ptr<const std::vector<std::int64_t>> order;
  };
  std::mutex mutex;
  Entry entries[2];
  int next = 0;  // the entry to replace: the older one
};

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  WF_CHECK(n >= 0 && epoch >= 0, "epoch_permutation: n = {} and epoch = {} must be non-negative", n, epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  // Each epoch has its own stream, so epoch e is computed without replaying epochs 0 … e − 1.
  SplitMix64 rng(SplitMix64::mix(seed ^ SplitMix64::mix(static_cast<std::uint64_t>(epoch) + 0x5eedull)));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

BatchLoader::BatchLoader(std::shared_ptr<TokenSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)), cache_(std::make_unique<PermutationCache>()) {
  WF_CHECK(source_ != nullptr, "BatchLoader: no token source");
  check_options(options_);
  const std::int64_t N = options_.seq_len;
  samples_per_epoch_ = source_->size() > 0 ? (source_->size() - 1) / N : 0;
  WF_CHECK(samples_per_epoch_ > 0,
           "BatchLoader: {} holds {} tokens, too few for one sequence of seq_len {} (it needs at least {} tokens: "
           "{} inputs and the next token as the last target); use a shorter train.seq_len or more data",
           source_->describe(), source_->size(), N, N + 1, N);
  runs_ = options_.shard.runs();
  positions_ = parallel::run_positions(runs_);
}

BatchLoader::~BatchLoader() = default;
BatchLoader::BatchLoader(BatchLoader&&) noexcept = default;
BatchLoader& BatchLoader::operator=(BatchLoader&&) noexcept = default;

std::int64_t BatchLoader::global_batch_size() const {
  return options_.micro_batch_size * options_.dp_size * options_.grad_accum_steps;
}

std::int64_t BatchLoader::samples_per_epoch() const { return samples_per_epoch_; }

std::int64_t BatchLoader::epoch(std::int64_t step) const {
  WF_CHECK(step >= 0, "BatchLoader: step {} is negative", step);
  return step * global_batch_size() / samples_per_epoch_;
}

std::int64_t BatchLoader::stream_index(std::int64_t step, std::int64_t micro, std::int64_t b) const {
  WF_CHECK(step >= 0, "BatchLoader: step {} is negative", step);
  WF_CHECK(micro >= 0 && micro < options_.grad_accum_steps,
           "BatchLoader: micro batch {} is outside [0, grad_accum_steps = {})", micro, options_.grad_accum_steps);
  WF_CHECK(b >= 0 && b < options_.micro_batch_size, "BatchLoader: row {} is outside [0, micro_batch_size = {})", b,
           options_.micro_batch_size);
  return ((step * options_.grad_accum_steps + micro) * options_.dp_size + options_.dp_rank) *
             options_.micro_batch_size +
         b;
}

std::int64_t BatchLoader::sample_at(std::int64_t index) const {
  WF_CHECK(index >= 0, "BatchLoader: sample stream index {} is negative", index);
  const std::int64_t within = index % samples_per_epoch_;
  if (!options_.shuffle) return within;
  return (*permutation(index / samples_per_epoch_))[static_cast<std::size_t>(within)];
}

std::shared_ptr<const std::vector<std::int64_t>> BatchLoader::permutation(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  for (const PermutationCache::Entry& cached : cache_->entries) {
    if (cached.epoch == epoch) return cached.order;
  }
  PermutationCache::Entry& slot = cache_->entries[cache_->next];
  cache_->next = 1 - cache_->next;
  slot.epoch = epoch;
  slot.order = std::make_shared<const std::vector<std::int64_t>>(
      epoch_permutation(samples_per_epoch_, options_.seed, epoch));
  return slot.order;
}

Batch BatchLoader::get(std::int64_t step, std::int64_t micro) const {
  const std::int64_t N = options_.seq_len;
  const std::int64_t B = options_.micro_batch_size;
  const auto n_local = static_cast<std::int64_t>(positions_.size());
  Batch batch;
  batch.inputs = Tensor::empty({B, n_local}, DType::i64);
  batch.targets = Tensor::empty({B, n_local}, DType::i64);
  batch.positions = Tensor::from_vector(positions_, {n_local});
  batch.global_tokens = global_batch_size() * N;  // every position of a window has a target
  std::int64_t* inputs = batch.inputs.data<std::int64_t>();
  std::int64_t* targets = batch.targets.data<std::int64_t>();
  std::vector<std::int64_t> window;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t sample = sample_at(stream_index(step, micro, b));
    batch.samples.push_back(sample);
    // Only this rank's runs are read, each with the one token after it for the last target:
    // a rank touches N/P + (runs) tokens of a sequence, not N.
    std::int64_t column = b * n_local;
    for (const parallel::TokenRun& run : runs_) {
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
