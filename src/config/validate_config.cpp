// Cross-key checks of a run config against the world size. Every problem is collected as
// "key: rule" in a fixed order and reported in ONE message, so a misconfigured job fails on
// every rank with the same text and the user fixes everything in one round.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "src/config/schema.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/parallel/pipeline_schedule.h"
#include "wallfacer/parallel/pipeline_stages.h"
#include "wallfacer/parallel/sequence_layout.h"

namespace wf::config {
namespace {

const char* const kGridKeys =
    "parallel.dp, parallel.tp, parallel.pp, parallel.sp, parallel.C, parallel.U, parallel.order";

bool has_teams(const ParallelSection& p) {
  return p.sp_strategy == parallel::SpStrategy::wallfacer || p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer;
}
// The team size the sequence layout is cut with: WallFacer's C; ring and Ulysses have no teams.
int layout_team_size(const ParallelSection& p) { return has_teams(p) ? p.C : 1; }
// The Ulysses degree the sequence layout is cut with: the hybrid's U, else 1.
int layout_ulysses_degree(const ParallelSection& p) {
  return p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? p.U : 1;
}

// The grid's "; keeping the other sizes, sp = 6 would fit" looks at the four sizes alone; here it
// names only layouts the whole config validates under (fitting_layouts), or none.
std::string with_validated_fits(std::string rule, const RunConfig& c, int world_size, ValidateScope scope,
                                double machine_bytes, int ranks_per_machine) {
  constexpr std::string_view kHint = "; keeping the other sizes, ";
  if (const std::size_t at = rule.find(kHint); at != std::string::npos) {
    const std::size_t end = rule.find(" would fit", at);
    rule.erase(at, end == std::string::npos ? std::string::npos : end + 10 - at);
  }
  const ParallelSection& p = c.parallel;
  if (ranks_needed(p) == 0 || ranks_needed(p) == world_size) return rule;
  std::vector<std::string> one_size, whole;
  for (const LayoutChange& change : fitting_layouts(c, world_size, scope, machine_bytes, 3, ranks_per_machine)) {
    const ParallelSection& to = change.layout;
    const std::array<std::tuple<const char*, int, int>, 4> sizes = {
        {{"dp", p.dp, to.dp}, {"tp", p.tp, to.tp}, {"pp", p.pp, to.pp}, {"sp", p.sp, to.sp}}};
    for (const auto& [name, before, after] : sizes) {
      if (change.keys.size() == 1 && before != after) one_size.push_back(fmt::format("{} = {}", name, after));
    }
    if (change.keys.size() > 1) whole.push_back(change.set_flags());
  }
  if (!one_size.empty()) return fmt::format("{}{}{} would fit", rule, kHint, fmt::join(one_size, " or "));
  if (!whole.empty()) {
    return fmt::format("{}; a layout of {} ranks that validates: {}", rule, world_size, whole.front());
  }
  return rule;
}

// false when the grid itself is invalid: the checks after it divide by its sizes.
bool check_layout(const RunConfig& c, int world_size, ValidateScope scope, double machine_bytes,
                  int ranks_per_machine, std::vector<std::string>& problems) {
  const ParallelSection& p = c.parallel;
  try {
    comm::ProcessGrid::validate(p.grid(), world_size);
  } catch (const Error& e) {
    // The grid's own "invalid parallel layout for a world of N ranks: " would repeat ours.
    std::string rule = detail::without_location(e.what());
    if (const std::size_t colon = rule.find(" ranks: "); rule.starts_with("invalid parallel layout") &&
                                                        colon != std::string::npos) {
      rule.erase(0, colon + 8);
    }
    rule = with_validated_fits(rule, c, world_size, scope, machine_bytes, ranks_per_machine);
    problems.push_back(fmt::format("{}: {}", kGridKeys, rule));
    return false;
  }
  if (p.C > 1 && !has_teams(p)) {
    problems.push_back(fmt::format(
        "parallel.C: C = {} is the WallFacer team size, but parallel.sp_strategy {} has no teams: set C to 1 or "
        "sp_strategy to wallfacer (or ulysses-wallfacer)",
        p.C, parallel::sp_strategy_name(p.sp_strategy)));
  }
  if (p.U > 1 && p.sp_strategy != parallel::SpStrategy::ulysses_wallfacer) {
    problems.push_back(fmt::format(
        "parallel.U: U = {} is the Ulysses degree of the ulysses-wallfacer hybrid, but parallel.sp_strategy is {}: "
        "set U to 1 or sp_strategy to ulysses-wallfacer",
        p.U, parallel::sp_strategy_name(p.sp_strategy)));
  }
  return true;
}

// The sequence length against the layout the model's mask needs: zigzag balances causal work.
void check_sequence_layout(const RunConfig& c, const ModelFacts& facts, std::vector<std::string>& problems) {
  const ParallelSection& p = c.parallel;
  const parallel::SequenceLayout layout = parallel::layout_for_mask(facts.causal);
  try {
    parallel::check_sequence_length(layout, c.train.seq_len, p.sp, layout_team_size(p), layout_ulysses_degree(p));
  } catch (const Error& e) {
    problems.push_back(fmt::format("train.seq_len: sp_strategy {} over parallel.sp = {} ranks: {}",
                                   parallel::sp_strategy_name(p.sp_strategy), p.sp,
                                   detail::without_location(e.what())));
  }
  // Activation sharding splits each rank's tokens (seq_len / sp of them) over tp.
  if (p.tp_shard_activations && p.sp > 0 && c.train.seq_len % p.sp == 0 && (c.train.seq_len / p.sp) % p.tp != 0) {
    // The valid lengths also fit the layout: multiples of lcm(its multiple, sp x tp).
    const std::int64_t layout_multiple =
        parallel::sequence_length_multiple(layout, p.sp, layout_team_size(p), layout_ulysses_degree(p));
    const std::int64_t multiple = std::lcm(layout_multiple, std::int64_t{p.sp} * p.tp);
    const std::int64_t below = c.train.seq_len / multiple * multiple, above = below + multiple;
    problems.push_back(fmt::format("parallel.tp_shard_activations: each rank's seq_len / sp = {} / {} = {} tokens do "
                                   "not split over parallel.tp = {}; choose a seq_len that is a multiple of sp x tp = "
                                   "{} and of the {} layout's {} (nearest valid seq_len: {}), or turn "
                                   "tp_shard_activations off",
                                   c.train.seq_len, p.sp, c.train.seq_len / p.sp, p.tp, p.sp * p.tp,
                                   parallel::sequence_layout_name(layout), layout_multiple,
                                   below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above)));
  }
}

// The rules every model shares, from its facts: the sequence limit, the tokenizer's vocabulary,
// blocks over pipeline stages. The model's own rules are its schema's (model_schema.h).
void check_model_facts(const RunConfig& c, const ModelFacts& facts, std::vector<std::string>& problems) {
  const auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  if (facts.max_seq_len > 0) {
    require(c.train.seq_len <= facts.max_seq_len,
            fmt::format("train.seq_len: seq_len = {} exceeds model.max_seq_len = {}: raise max_seq_len or shorten the "
                        "sequences",
                        c.train.seq_len, facts.max_seq_len));
  }
  if (facts.vocab_size > 0 && c.data.source == DataSource::file) {  // synthetic tokens fit any vocabulary
    const std::int64_t min_vocab = c.data.tokenizer == TokenizerKind::byte ? 256 : 50257;
    require(facts.vocab_size >= min_vocab,
            fmt::format("model.vocab_size: vocab_size = {} is smaller than the {} tokenizer's {} tokens",
                        facts.vocab_size, tokenizer_name(c.data.tokenizer), min_vocab));
  }
  const ParallelSection& p = c.parallel;
  if (p.pp > 1 && facts.n_layer <= 0) {
    problems.push_back(fmt::format("parallel.pp: model {} cannot be cut into pipeline stages (it declares no blocks to "
                                   "split); set parallel.pp to 1",
                                   c.model.name));
  }
  if (facts.n_layer > 0) {
    for (std::string& problem : parallel::pipeline_layer_problems(facts.n_layer, p.pp, p.pp_virtual, p.pp_layers)) {
      problems.push_back(std::move(problem));
    }
  }
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / double(1ULL << 30)); }

// No machine has this much memory per rank (1 PiB): beyond it a config is absurd anywhere.
constexpr double kAbsurdBytes = double(1ULL << 50);

// The estimated memory of the ranks that share a machine against what it has (any machine: one
// rank against the absurd bound).
void check_memory(const RunConfig& c, ValidateScope scope, double machine_bytes, int ranks_per_machine,
                  std::vector<std::string>& problems) {
  const MemoryEstimate need = memory_per_rank(c);
  const double machine = machine_bytes > 0 ? machine_bytes : static_cast<double>(machine_memory_bytes());
  const bool here = scope == ValidateScope::this_machine;
  const int sharing = here ? std::max(ranks_per_machine, 1) : 1;
  const double have = here ? machine : kAbsurdBytes;
  if (need.total() * sharing <= have) return;
  const std::string rank = fmt::format(
      "a rank would need about {} ({} for weights, gradients and AdamW state, {} for the activations of one micro "
      "batch)",
      gib(need.total()), gib(need.parameter_bytes()), gib(need.activation_bytes));
  if (!here || need.total() > have) {  // one rank alone does not fit: how many share the machine is moot
    problems.push_back(fmt::format("model: {}, but {}: shrink the model's sizes (its model.* keys) or "
                                   "train.micro_batch_size / train.seq_len, or split it over more ranks",
                                   rank, here ? fmt::format("a machine of this job has {}", gib(have))
                                              : fmt::format("no machine has more than {}", gib(have))));
    return;
  }
  // Ranks on one machine share its memory: their estimates add up.
  const int fit = static_cast<int>(std::min<double>(have / need.total(), sharing - 1));  // >= 1 here
  problems.push_back(fmt::format(
      "model: {}, and {} ranks share a machine of {}: {} x {} = {} does not fit; run at most {} rank{} per machine "
      "(spread the job over more machines), or shrink the model's sizes (its model.* keys) or "
      "train.micro_batch_size / train.seq_len, or split the model over more tp / pp ranks",
      rank, sharing, gib(have), sharing, gib(need.total()), gib(need.total() * sharing), fit, fit == 1 ? "" : "s"));
}

// The schedule of a pipeline over the step's microbatches (the gradient-accumulation steps).
void check_pipeline_schedule(const RunConfig& c, std::vector<std::string>& problems) {
  const ParallelSection& p = c.parallel;
  if (p.pp == 1) {
    if (p.pp_virtual != 1) {
      problems.push_back(fmt::format("parallel.pp_virtual: pp_virtual = {} model chunks per rank need a pipeline; set "
                                     "it to 1, or parallel.pp > 1 with pp_schedule interleaved",
                                     p.pp_virtual));
    }
    return;
  }
  if (p.pp < 1 || p.dp < 1) return;  // the grid's rules say why
  for (std::string& problem : parallel::pipeline_schedule_problems(p.pp_schedule, p.pp, static_cast<int>(grad_accum_steps(c)),
                                                                   p.pp_virtual)) {
    problems.push_back(std::move(problem));
  }
}

void check_train(const RunConfig& c, std::vector<std::string>& problems) {
  const TrainConfig& t = c.train;
  // load_config checks the range; a config built in code must not reach the trainer's buckets with
  // a size that overflows their byte count.
  const double bucket = c.parallel.grad_bucket_mb;
  if (!(bucket >= kMinGradBucketMb && bucket <= kMaxGradBucketMb)) {
    problems.push_back(fmt::format("parallel.grad_bucket_mb: {} MiB is out of range: set it from {} to {} (MiB per "
                                   "gradient bucket; the default 25 suits most runs)",
                                   bucket, kMinGradBucketMb, kMaxGradBucketMb));
  }
  std::int64_t per_step = 0;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(c.parallel.dp), t.micro_batch_size, &per_step) ||
      __builtin_mul_overflow(per_step, t.seq_len, &per_step)) {
    problems.push_back(fmt::format("train.micro_batch_size: parallel.dp x train.micro_batch_size x train.seq_len = "
                                   "{} x {} x {} tokens per micro step does not fit in 64 bits: lower them",
                                   c.parallel.dp, t.micro_batch_size, t.seq_len));
    return;
  }
  per_step = static_cast<std::int64_t>(c.parallel.dp) * t.micro_batch_size;
  if (t.global_batch_size != 0 && c.parallel.dp >= 1 && t.global_batch_size % per_step != 0) {
    const std::int64_t below = std::max<std::int64_t>(per_step, t.global_batch_size / per_step * per_step);
    std::int64_t above = 0;  // the next multiple, when it fits in 64 bits
    const bool above_fits = !__builtin_add_overflow(t.global_batch_size / per_step * per_step, per_step, &above);
    problems.push_back(fmt::format(
        "train.global_batch_size: {} sequences is not a multiple of parallel.dp x train.micro_batch_size = {} x {} = "
        "{}: {}",
        t.global_batch_size, c.parallel.dp, t.micro_batch_size, per_step,
        above_fits && above != below ? fmt::format("nearest valid values {} or {}", below, above)
                                     : fmt::format("nearest valid value {}", below)));
  } else {
    check_pipeline_schedule(c, problems);
  }
  if (t.min_lr > t.lr) {
    problems.push_back(fmt::format("train.min_lr: min_lr = {} exceeds lr = {}: the schedule decays from lr down to "
                                   "min_lr",
                                   t.min_lr, t.lr));
  }
  if (t.eval_every > 0 && c.data.val_path.empty() && c.data.source == DataSource::file) {
    problems.push_back(fmt::format("train.eval_every: eval_every = {} but data.val_path is empty: give a validation "
                                   "file or set eval_every to 0",
                                   t.eval_every));
  }
}

// data.pack reads the document indexes of token files.
void check_packing(const RunConfig& c, std::vector<std::string>& problems) {
  if (!c.data.pack) return;
  if (model_schema(c.model.name).image_data) {
    problems.push_back(fmt::format("data.pack: packs documents of token files, but model {} reads images: set "
                                   "data.pack: false",
                                   c.model.name));
  } else if (c.data.source != DataSource::file) {
    problems.push_back("data.pack: synthetic tokens have no documents: set data.source: file with token files from "
                       "`wallfacer prepare-text`, or data.pack: false");
  }
}

// Why this process cannot read `path` as a file, or "" when it can.
std::string unreadable_reason(const std::string& path) {
  // O_NONBLOCK: a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::strerror(errno);
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool directory = !regular && S_ISDIR(st.st_mode);
  ::close(fd);
  if (regular) return "";
  return directory ? "it is a directory" : "it is not a regular file";
}

// The IDX image and label files of an image model (DiT).
void check_image_files(const RunConfig& c, std::vector<std::string>& problems) {
  const auto check = [&](std::string_view key, const std::string& path, std::string_view pair_key,
                         const std::string& pair) {
    if (path.empty() && pair.empty()) return;  // no validation set
    if (path.empty()) {
      problems.push_back(fmt::format("{}: is empty but {} is '{}': give both the images and their labels", key,
                                     pair_key, pair));
      return;
    }
    const std::string reason = unreadable_reason(path);
    if (reason.empty()) return;
    problems.push_back(fmt::format(
        "{}: cannot read the IDX file '{}': {}; point it at an IDX file (Fashion-MNIST: apt-get install "
        "dataset-fashion-mnist, files under /usr/share/dataset-fashion-mnist), or set data.source to synthetic",
        key, path, reason));
  };
  check("data.train_path", c.data.train_path, "data.train_labels_path", c.data.train_labels_path);
  check("data.train_labels_path", c.data.train_labels_path, "data.train_path", c.data.train_path);
  check("data.val_path", c.data.val_path, "data.val_labels_path", c.data.val_labels_path);
  check("data.val_labels_path", c.data.val_labels_path, "data.val_path", c.data.val_path);
}

// The token files of a file source, which `train` opens at once: on this machine only (another
// machine of the job may hold them); an image model's IDX files.
void check_data_files(const RunConfig& c, std::vector<std::string>& problems) {
  if (c.data.source != DataSource::file) return;
  if (model_schema(c.model.name).image_data) return check_image_files(c, problems);
  const auto check = [&](std::string_view key, const std::string& path) {
    if (path.empty()) return;  // no validation set
    const std::string reason = unreadable_reason(path);
    if (reason.empty()) return;
    const std::string dir = std::filesystem::path(path).parent_path().string();
    problems.push_back(fmt::format(
        "{}: cannot read the token file '{}': {}; write it with `wallfacer prepare-text --input TEXT.txt "
        "--output-dir {} --tokenizer {}` (train.bin and val.bin), point {} at an existing token file, or set "
        "data.source to synthetic",
        key, path, reason, dir.empty() ? "." : dir, tokenizer_name(c.data.tokenizer), key));
  };
  check("data.train_path", c.data.train_path);
  check("data.val_path", c.data.val_path);
  if (!c.data.pack) return;
  // The indexes' contents are checked when the loader opens them; here only that they are there.
  for (const std::string* path : {&c.data.train_path, &c.data.val_path}) {
    if (path->empty() || !unreadable_reason(*path).empty()) continue;
    const std::string index = data::document_index_path(*path);
    if (const std::string reason = unreadable_reason(index); !reason.empty()) {
      problems.push_back(fmt::format("data.pack: cannot read the document index '{}' of token file '{}': {}; re-run "
                                     "`wallfacer prepare-text` (it writes each token file's index beside it), or set "
                                     "data.pack: false",
                                     index, *path, reason));
    }
  }
}

}  // namespace

std::vector<std::string> unsupported_by_trainer(const RunConfig& c) {
  std::vector<std::string> problems;
  // train.dtype: f32, or bf16 mixed precision (f32 masters, nn/precision.h). The schema takes
  // no other value.
  // train.device: a device whose type this build has no backend for (cuda, until a CUDA build
  // registers one) would fail at the first tensor the trainer moves there.
  // auto falls back to the CPU where there is no GPU or no CUDA build.
  const bool automatic = c.train.device == kAutoDevice;
  if (!automatic && find_device_backend(c.train.device.type) == nullptr) {
    problems.push_back(fmt::format(
        "train.device is {}, but this build has no {} backend (build with the CUDA toolkit: scripts/build.sh finds "
        "/usr/local/cuda); set train.device: cpu, or auto to use a GPU only where the build and the machine have one",
        device_type_name(c.train.device.type), device_type_name(c.train.device.type)));
  } else if (!automatic && c.train.device.is_cuda()) {
    std::string why;
    if (cuda_devices(&why).empty()) {
      problems.push_back(fmt::format("train.device is cuda, but no CUDA GPU is visible to this process ({}); set "
                                     "train.device: cpu, or auto to use a GPU only where there is one",
                                     why));
    }
  }
  // train.cuda_graph: a graph records one process's kernels on one stream; the collectives of a
  // multi-process step and the host data of packed batches (their documents' boundaries change
  // every batch) cannot be replayed.
  if (c.train.cuda_graph) {
    if (c.train.device.is_cpu()) {
      problems.push_back("train.cuda_graph is true, but train.device is cpu, which runs no graphs; set train.device: "
                         "cuda (or auto), or train.cuda_graph: false");
    }
    const ParallelSection& p = c.parallel;
    if (static_cast<std::int64_t>(p.dp) * p.tp * p.pp * p.sp > 1) {
      problems.push_back(fmt::format(
          "train.cuda_graph is true, but the run has {} processes (parallel.dp {} x tp {} x pp {} x sp {}): a graph "
          "captures one process's step, without the collectives of the others; set train.cuda_graph: false, or run "
          "on one process",
          static_cast<std::int64_t>(p.dp) * p.tp * p.pp * p.sp, p.dp, p.tp, p.pp, p.sp));
    }
    if (c.data.pack) {
      problems.push_back("train.cuda_graph is true, but data.pack is true: the documents' boundaries change with every "
                         "batch, and a replayed graph would keep the first batch's; set one of them to false");
    }
  }
  // comm.gpu_transport: nccl on a GPU needs this build's NCCL; whether ranks share a GPU is known
  // only when the job runs (CommGrid::use_device then refuses with the same fix).
  if (c.comm.gpu_transport == comm::GpuTransport::nccl && c.train.device.is_cuda() && !comm::nccl_available()) {
    problems.push_back("comm.gpu_transport is nccl, but this build has no NCCL (configure with the CUDA toolkit and "
                       "NCCL installed); set comm.gpu_transport: staged or auto to move GPU tensors through pinned "
                       "host memory over MPI");
  }
  return problems;
}

MemoryEstimate memory_per_rank(const RunConfig& c) {
  const ModelFacts facts = model_facts(c);
  const ParallelSection& p = c.parallel;
  MemoryEstimate m;
  // f32 weight, gradient and AdamW's two moments; ZeRO splits the moments (stage 1) and the
  // gradients (stage 2) over the replica group, which adds a gradient shard from stage 1 on.
  const double replicas = static_cast<double>(p.dp) * p.sp;
  const int zero = replicas > 1 ? p.zero : 0;
  const double gradient = zero == 2 ? 4.0 / replicas : 4.0 + (zero == 1 ? 4.0 / replicas : 0.0);
  // The moments, and the EMA of the weights when one is kept (train.ema_decay).
  const double state = c.train.ema_decay > 0 ? 12.0 : 8.0;
  const double moments = zero >= 1 ? state / replicas : state;
  const double shard = facts.parameters / (static_cast<double>(p.tp) * p.pp);
  m.weight_bytes = 4.0 * shard;
  m.gradient_bytes = gradient * shard;
  m.optimizer_bytes = moments * shard;
  const double tokens = static_cast<double>(c.train.micro_batch_size) * static_cast<double>(c.train.seq_len) / p.sp;
  // A pipeline stage keeps the activations of every microbatch it has run forward but not yet
  // backward: all of them under GPipe, at most pp under 1F1B (the first stage's warm-up), and
  // under interleaving its warm-up's chunks (each 1/v of the stage).
  double in_flight = 1;
  if (p.pp > 1 && p.dp >= 1 && c.train.micro_batch_size >= 1) {
    const double m = static_cast<double>(grad_accum_steps(c)), v = p.pp_virtual;
    switch (p.pp_schedule) {
      case parallel::PipelineScheduleKind::gpipe: in_flight = m; break;
      case parallel::PipelineScheduleKind::one_f_one_b: in_flight = std::min<double>(p.pp, m); break;
      case parallel::PipelineScheduleKind::interleaved:
        in_flight = std::min(m * v, 2.0 * (p.pp - 1) + (v - 1) * p.pp + 1) / v;
        break;
    }
  }
  // Tensor parallelism splits the heads' and feed-forward's activations; the d_model-wide rest
  // only with tp_shard_activations.
  const double replicated = facts.activation_bytes_per_token_tp_replicated;
  double per_token = (facts.activation_bytes_per_token - replicated) / p.tp +
                     replicated / (p.tp_shard_activations ? p.tp : 1);
  // At tp = 1 a chunked head keeps no per-token logits, only its dh and one chunk's working set.
  double fixed = 0;
  if (p.tp == 1 && facts.fused_head_bytes > 0) {
    per_token += facts.fused_head_bytes_per_token - facts.head_logits_bytes_per_token;
    fixed = facts.fused_head_bytes;
  }
  m.activation_bytes = per_token * tokens * in_flight / p.pp + fixed;
  return m;
}

std::vector<std::string> validation_problems(const RunConfig& config, int world_size, ValidateScope scope,
                                             double machine_bytes, int ranks_per_machine) {
  std::vector<std::string> problems;
  const bool layout_ok = check_layout(config, world_size, scope, machine_bytes, ranks_per_machine, problems);
  if (layout_ok) {
    const std::size_t before_model = problems.size();
    if (const auto& rules = model_schema(config.model.name).validate) rules(config, problems);
    if (problems.size() == before_model) {
      const ModelFacts facts = model_facts(config);
      check_sequence_layout(config, facts, problems);
      check_model_facts(config, facts, problems);
    }
  }
  check_train(config, problems);
  check_packing(config, problems);
  if (scope == ValidateScope::this_machine) {
    for (std::string& p : unsupported_by_trainer(config)) problems.push_back(std::move(p));
  }
  if (problems.empty()) check_memory(config, scope, machine_bytes, ranks_per_machine, problems);
  if (scope == ValidateScope::this_machine) check_data_files(config, problems);
  return problems;
}

void validate(const RunConfig& config, int world_size, ValidateScope scope, double machine_bytes,
              int ranks_per_machine) {
  const std::vector<std::string> problems =
      validation_problems(config, world_size, scope, machine_bytes, ranks_per_machine);
  WF_USER_CHECK(problems.empty(), "invalid config for a world of {} ranks: {}", world_size, fmt::join(problems, "; "));
}

int ParallelSection::ulysses_degree() const {
  if (sp_strategy == parallel::SpStrategy::ulysses) return sp;
  return sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? U : 1;
}

std::string ParallelSection::ulysses_degree_text() const {
  if (sp_strategy == parallel::SpStrategy::ulysses_wallfacer) {
    return fmt::format("sp_strategy ulysses-wallfacer over parallel.U = {}", U);
  }
  return fmt::format("sp_strategy {} over parallel.sp = {}", parallel::sp_strategy_name(sp_strategy), sp);
}

// Each note is about a setting (or two that act together) and is made only when the config text or
// a --set gave one of them: a default the user never chose is no reason to warn on every run.
std::vector<std::string> notes(const RunConfig& c) {
  std::vector<std::string> out;
  const auto given = [&](std::string_view a, std::string_view b = {}) {
    return c.given.contains(a) || (!b.empty() && c.given.contains(b));
  };
  if (c.parallel.zero > 0 && c.parallel.dp * c.parallel.sp == 1 && given("parallel.zero")) {
    out.push_back(fmt::format("parallel.zero: ZeRO-{} shards over the replica group (dp x sp = 1 rank here), so it "
                              "changes nothing; raise dp or sp to shard",
                              c.parallel.zero));
  }
  if (c.train.warmup_steps > c.train.steps && given("train.warmup_steps", "train.steps")) {
    out.push_back(fmt::format("train.warmup_steps: {} warmup steps exceed train.steps = {}: the warmup is cut at step "
                              "{}, so the learning rate never reaches train.lr (a short smoke run; raise steps or "
                              "lower warmup_steps for a real one)",
                              c.train.warmup_steps, c.train.steps, c.train.steps));
  }
  const ParallelSection& p = c.parallel;
  if (has_teams(p) && given("parallel.placement")) {
    if (std::string note = comm::placement_note(p.sp, p.C, layout_ulysses_degree(p)); !note.empty()) {
      out.push_back(std::move(note));
    }
  }
  if (p.sp > 1 && parallel::effective_sp_strategy(p.sp_strategy, p.sp, p.U) != p.sp_strategy &&
      given("parallel.U", "parallel.sp_strategy")) {
    out.push_back(fmt::format("parallel.U: with U = {} the ulysses-wallfacer hybrid is exactly {} (no {} part)", p.U,
                              p.U == 1 ? "wallfacer" : "ulysses", p.U == 1 ? "Ulysses" : "WallFacer"));
  }
  return out;
}

std::int64_t global_batch_sequences(const RunConfig& config) {
  return config.train.global_batch_size != 0 ? config.train.global_batch_size
                                             : static_cast<std::int64_t>(config.parallel.dp) * config.train.micro_batch_size;
}

std::int64_t grad_accum_steps(const RunConfig& config) {
  return global_batch_sequences(config) / (static_cast<std::int64_t>(config.parallel.dp) * config.train.micro_batch_size);
}

namespace {
std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  return fmt::format("{:.1f}K", n / 1e3);
}
}  // namespace

std::string summary(const RunConfig& c, int world_size) {
  const ParallelSection& p = c.parallel;
  std::string strategy = parallel::sp_strategy_name(p.sp_strategy);
  if (p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer) {
    strategy += fmt::format(" U {} ({} inner)", p.U, p.ulysses_inner ? "Ulysses" : "WallFacer");
  }
  if (has_teams(p)) strategy += fmt::format(" C {} ({})", p.C, comm::placement_name(p.placement));
  const ModelFacts facts = model_facts(c);
  std::string pipeline;
  if (p.pp > 1) {
    const parallel::PipelineSchedule schedule(p.pp_schedule, p.pp, static_cast<int>(grad_accum_steps(c)), p.pp_virtual);
    pipeline = fmt::format(", pp_schedule {}{} over {} microbatches (ideal bubble {:.3f})", parallel::to_string(p.pp_schedule),
                           p.pp_virtual > 1 ? fmt::format(" x {} chunks", p.pp_virtual) : "", schedule.microbatches(),
                           schedule.ideal_bubble());
  }
  return fmt::format(
      "{} {}, {} parameters; world {} = dp {} x tp {} x pp {} x sp {}, order {}, sp_strategy {}{}; seq_len {} ({} "
      "tokens per sp rank, {}); {} sequences per step = dp {} x micro_batch {} x accumulation {}; {}; about {} per "
      "rank",
      c.model.name, facts.description, human_count(facts.parameters), world_size, p.dp, p.tp, p.pp, p.sp, p.order,
      strategy, pipeline, c.train.seq_len, c.train.seq_len / p.sp,
      parallel::sequence_layout_name(parallel::layout_for_mask(facts.causal)),
      global_batch_sequences(c), p.dp, c.train.micro_batch_size, grad_accum_steps(c), dtype_name(c.train.dtype),
      gib(memory_per_rank(c).total()));
}

}  // namespace wf::config
