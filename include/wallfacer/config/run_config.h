#pragma once
// The run configuration: one YAML file per run with the sections model, parallel, train, data,
// checkpoint and log (docs/config.md lists every key). load_config reads and type-checks the
// file and the --set overrides; validate checks the combinations against the world size. Both
// throw wf::Error with one message that names the key and the rule, and whose text depends only
// on the inputs, so every rank of a misconfigured run fails with the same message.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/transport.h"
#include "wallfacer/config/model_config.h"
#include "wallfacer/core/device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/parallel/pipeline_schedule.h"
#include "wallfacer/parallel/sp_strategy.h"

namespace wf::config {

enum class TokenizerKind { byte, gpt2 };
enum class DataSource { file, synthetic };

// parallel.grad_bucket_mb's range: about 1 KiB (smaller is a collective per few parameters) to about
// 1 TiB (any bucket larger than the model is one bucket; far past it the byte count overflows).
inline constexpr double kMinGradBucketMb = 0.001, kMaxGradBucketMb = 1e6;

struct ParallelSection {
  int dp = 1, tp = 1, pp = 1, sp = 1;
  std::string order = "tp-sp-dp-pp";  // innermost first, as comm::ParallelConfig::order
  int C = 1;                          // WallFacer team size; only wallfacer and ulysses-wallfacer use C > 1
  // sp_strategy ulysses-wallfacer: the Ulysses degree U (U | sp, C² | sp/U) and whether the U
  // Ulysses ranks are adjacent (true, USP's default) or the sp/U WallFacer ranks are
  // (comm::ParallelConfig). Every other strategy needs U = 1.
  int U = 1;
  bool ulysses_inner = true;
  comm::Placement placement = comm::Placement::collectives_intra;
  parallel::SpStrategy sp_strategy = parallel::SpStrategy::wallfacer;
  // Megatron's "sequence parallelism" inside tp: the residual stream, norms and residual dropout
  // hold 1/tp of each rank's tokens instead of all of them (reduce-scatter / all-gather around
  // the tensor-parallel layers instead of all-reduces); parallel/tensor_parallel.h.
  bool tp_shard_activations = false;
  // ZeRO over the replica group (dp × sp, per tp coordinate): 0 off, 1 optimizer state sharded,
  // 2 gradients sharded as well (train/replica_gradients.h).
  int zero = 0;
  // Gradient bucket size in MiB: one collective per bucket, started as soon as its gradients are final.
  // From kMinGradBucketMb to kMaxGradBucketMb (above).
  double grad_bucket_mb = 25;
  // The dtype gradients are reduced in over the replica group: f32, or bf16 (half the bytes;
  // every combine still adds in f32, and accumulation and the optimizer stay f32).
  DType grad_reduce_dtype = DType::f32;
  // Pipeline parallelism (parallel.pp > 1): the schedule of a step's microbatches
  // (parallel/pipeline_schedule.h), the model chunks per rank for the interleaved schedule, and
  // optionally the blocks of each (virtual) stage in global stage order (empty: an even split).
  parallel::PipelineScheduleKind pp_schedule = parallel::PipelineScheduleKind::one_f_one_b;
  int pp_virtual = 1;
  std::vector<std::int64_t> pp_layers;
  // The ranks the strategy's all-to-all scatters each tp rank's heads over (ulysses_heads.h):
  // sp for ulysses, U for ulysses-wallfacer, 1 (none) otherwise; and, for messages, the key
  // that sets it: "sp_strategy ulysses over parallel.sp = 4".
  int ulysses_degree() const;
  std::string ulysses_degree_text() const;
  comm::ParallelConfig grid() const { return {dp, tp, pp, sp, order, C, placement, U, ulysses_inner}; }
  friend bool operator==(const ParallelSection&, const ParallelSection&) = default;
};

// train.device: auto. Not a device: resolved per rank by train::resolve_train_device.
inline constexpr Device kAutoDevice{DeviceType::cuda, -1};

struct TrainConfig {
  std::int64_t steps = 1000;             // optimizer steps
  std::int64_t micro_batch_size = 1;     // sequences per dp rank per forward/backward
  // Sequences (of seq_len tokens) per optimizer step over the whole job; 0 means
  // dp × micro_batch_size (no gradient accumulation). Must be a multiple of dp × micro_batch_size.
  std::int64_t global_batch_size = 0;
  std::int64_t seq_len = 1024;  // tokens per sequence (global, before sequence parallelism)
  double lr = 3e-4;
  double min_lr = 3e-5;  // the cosine schedule's floor
  std::int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // global grad-norm clip; 0 disables
  // > 0: the optimizer keeps an EMA of the weights with this decay (in checkpoints; DiT samples
  // with it). 0: none.
  double ema_decay = 0.0;
  // The decay grows with the step count, min(ema_decay, (1 + t) / (10 + t)) (train::ema_decay_at),
  // so a short run's EMA is not still its initial weights. A checkpoint whose config lacks the key
  // was written before the warm-up existed: its EMA decayed at ema_decay from the first step.
  bool ema_warmup = true;
  std::int64_t log_every = 10;
  std::int64_t eval_every = 0;  // 0: never
  std::int64_t eval_batches = 4;  // global batches per validation
  std::int64_t seed = 1234;
  DType dtype = DType::f32;  // f32 or bf16
  // Where the step runs: the parameters are initialised on the CPU (the same weights on every
  // device and layout) and moved there, and each batch is moved there before its forward.
  // cpu; cuda (each rank on the GPU of its local rank); auto (kAutoDevice: cuda where a GPU is
  // visible, else cpu); or testdev (the test device that proves the device seam,
  // docs/devices.md). train::resolve_train_device turns it into this rank's device.
  Device device = Device::cpu();
  // Debug: after every optimizer step, compare the tp ranks' copies of each replicated parameter
  // and fail naming any that drifted apart (parallel/replica_check.h). Two all-reduces per step.
  bool check_replicas = false;
  // Capture each micro batch's forward and backward as a device graph once, then replay it
  // (train::MicrobatchGraph, docs/devices.md "Graphs"): one launch per micro batch instead of one
  // per kernel. cuda or testdev, one process, unpacked batches; a step that cannot be captured
  // (dropout draws, a host read) warns and runs without a graph.
  bool cuda_graph = false;
  // A step whose gradient norm is not finite skips its update; this many such steps in a row end
  // the run with an error (the weights or the data have diverged) instead of skipping forever.
  std::int64_t max_skipped_steps = 10;
  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

struct DataConfig {
  DataSource source = DataSource::file;  // synthetic: seeded random tokens (benchmarks, any seq_len)
  std::string train_path = "data/kjv/train.bin";  // a token file from `wallfacer prepare-text`
  std::string val_path;  // empty: no validation set (then train.eval_every must be 0)
  // Image models (DiT): the IDX label files beside the IDX image files train_path and val_path.
  std::string train_labels_path;
  std::string val_labels_path;
  TokenizerKind tokenizer = TokenizerKind::byte;
  // Pack the documents of the token files into sequences (their .docs indexes, docs/data.md): each
  // token's position restarts in its document and the batches carry the boundaries.
  bool pack = false;
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct CheckpointConfig {
  std::string dir = "checkpoints";
  std::int64_t every = 0;  // steps between checkpoints; 0: only at the end
  std::int64_t keep_last = 3;  // newest checkpoints kept; 0: keep all
  friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

struct LogConfig {
  std::string dir = "logs";
  std::string metrics_file = "metrics.jsonl";  // JSON lines, inside dir
  // Per-rank peak FLOP/s (in GFLOP/s) that model FLOP utilisation (mfu) is measured against;
  // 0: measured at the start of training (OpenBLAS sgemm x threads, train/peak_flops.h).
  double peak_gflops = 0.0;
  friend bool operator==(const LogConfig&, const LogConfig&) = default;
};

// The key paths ("parallel.placement") that the YAML text or a --set gave, whatever their value:
// notes() remarks only on settings someone chose, never on a default. Where a value came from is
// not part of the configuration, so two configs that differ only here compare equal.
struct GivenKeys {
  std::set<std::string, std::less<>> paths;
  bool contains(std::string_view path) const { return paths.contains(path); }
  friend bool operator==(const GivenKeys&, const GivenKeys&) { return true; }
};

struct CommConfig {
  // How tensors on a GPU (or the test device) travel between ranks (comm/transport.h): auto
  // (nccl where every rank has a GPU of its own, else staged), nccl, or staged (MPI through
  // pinned host memory; what ranks that share a GPU need).
  comm::GpuTransport gpu_transport = comm::GpuTransport::automatic;
  friend bool operator==(const CommConfig&, const CommConfig&) = default;
};

struct RunConfig {
  ModelConfig model;
  ParallelSection parallel;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  CommConfig comm;
  GivenKeys given;  // filled by load_config, parse_config and apply_override
  friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

std::string_view tokenizer_name(TokenizerKind kind);    // "byte" / "gpt2"
std::string_view data_source_name(DataSource source);   // "file" / "synthetic"

// Reads the YAML file at `path`, then applies `overrides` ("section.key=value", the values of
// --set), then type- and range-checks every value. Throws wf::Error naming the file and line
// (unreadable file, YAML syntax, wrong type or range), or the key path and the valid keys of
// its section (unknown key or section, with a "did you mean" for a close spelling).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text; `source` names it in messages (a file name, "<string>").
RunConfig parse_config(std::string_view yaml, const std::vector<std::string>& overrides = {},
                       std::string_view source = "<string>");
// Applies one "section.key=value" override to `config`, with the checks load_config makes.
void apply_override(RunConfig& config, std::string_view override_text);

// The overrides ("section.key=value", as --set takes them) that turn `from` into `to`: model.name
// first where it differs (with every key of the new model), then each key whose value differs, in
// config_keys() order. Applying them to `from` gives a config equal to `to`.
std::vector<std::string> overrides_between(const RunConfig& from, const RunConfig& to);

// Every key path in file order: model.name and the keys of the default model (GPT), then the
// other sections'. Another model's keys: model_schema(name).keys.
std::vector<std::string> config_keys();

// What validate checks besides the config itself.
enum class ValidateScope {
  // Also whether this build's trainer and this machine can run it (tensor and pipeline
  // parallelism, bf16, the memory a rank needs): exactly what `wallfacer train` would refuse.
  this_machine,
  // The config alone (a GPU preset checked on a laptop: `wallfacer validate --any-machine`).
  any_machine,
};

// Checks the combinations load_config cannot see: the layout against the world size
// (comm::ProcessGrid::validate), the sequence length against the layout the model's attention
// mask needs (zigzag for causal), the model's own rules (its schema: heads against tp and the
// Ulysses degree, ...), the batch against dp, and with this_machine what the trainer supports and
// the estimated memory per rank against this machine's. Throws ONE wf::Error listing every
// problem as "key: rule"; the text is the same on every rank.
// `machine_bytes`: the memory of the smallest machine of the job (`wallfacer train` all-reduces
// it so every rank decides alike); 0: this machine's (machine_memory_bytes).
// `ranks_per_machine`: the ranks that share one machine's memory (the most on any node of the job);
// the memory check counts that many ranks' estimates against machine_bytes.
void validate(const RunConfig& config, int world_size, ValidateScope scope = ValidateScope::this_machine,
              double machine_bytes = 0, int ranks_per_machine = 1);
// validate's findings without the throw, one "key: rule" line each (empty: valid). What
// `wallfacer tune` prints as the reason a layout is excluded.
std::vector<std::string> validation_problems(const RunConfig& config, int world_size,
                                             ValidateScope scope = ValidateScope::this_machine, double machine_bytes = 0,
                                             int ranks_per_machine = 1);
// The ranks a layout needs: dp x tp x pp x sp (0 when a size is below 1 or the product past 2^31).
std::int64_t ranks_needed(const ParallelSection& parallel);
// A layout the config could run with instead, and the parallel keys it changes as --set takes
// them ("parallel.sp=2", "parallel.C=1"), in the order dp, tp, pp, sp, sp_strategy, C, U.
struct LayoutChange {
  ParallelSection layout;
  std::vector<std::string> keys;
  std::string set_flags() const;  // "--set parallel.sp=2 --set parallel.C=1"
};
// Up to `limit` layouts of `world_size` ranks under which `config` passes validation_problems (so
// a suggestion never fails on the next key): one size changed first, then the layouts of
// candidate_layouts by fewest changed keys. Empty when none passes.
std::vector<LayoutChange> fitting_layouts(const RunConfig& config, int world_size,
                                          ValidateScope scope = ValidateScope::this_machine, double machine_bytes = 0,
                                          std::size_t limit = 3, int ranks_per_machine = 1);
// The rules of the trainer in this build ("parallel.tp: ..."), empty when it can train the
// config; validate (this_machine) and the Trainer both apply them.
std::vector<std::string> unsupported_by_trainer(const RunConfig& config);

// A rough per-rank memory need: weights, gradients and AdamW state (16 bytes a parameter, split
// by tp × pp) plus the activations of one micro batch (the model's bytes per token times the
// tokens a rank holds). Doubles: absurd configs must not wrap.
struct MemoryEstimate {
  double weight_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;  // optimizer: AdamW's moments (and EMA)
  double activation_bytes = 0;
  double parameter_bytes() const { return weight_bytes + gradient_bytes + optimizer_bytes; }
  double total() const { return parameter_bytes() + activation_bytes; }
};
MemoryEstimate memory_per_rank(const RunConfig& config);

// Remarks on a valid config that are not errors (a setting that cannot matter for this layout),
// each about a setting the config text or a --set gave (config.given), never about a default,
// which `validate`, `grid` and `train` print.
std::vector<std::string> notes(const RunConfig& config);

// Gradient-accumulation steps: global_batch_size / (dp × micro_batch_size) (1 when 0 = auto).
std::int64_t grad_accum_steps(const RunConfig& config);
// Sequences per optimizer step over the whole job (global_batch_size, resolved when 0).
std::int64_t global_batch_sequences(const RunConfig& config);

// Every layout of `world_size` ranks without pipeline parallelism, by tp then sp: each
// dp × tp × sp = world_size, and for sp > 1 WallFacer with each team size C (C² | sp), then ring
// and Ulysses, then ulysses-wallfacer with each U (1 < U < sp, U | sp) and each C (C² | sp/U);
// order, placement and ulysses_inner are `base`'s. Whether a config can run one is validate's
// verdict (`wallfacer bench layout` runs those it accepts).
std::vector<ParallelSection> candidate_layouts(int world_size, const ParallelSection& base = {});

// The whole configuration as YAML that parse_config reads back to an equal RunConfig.
std::string to_yaml(const RunConfig& config);
// One line: the model, the layout and the batch, e.g. for "config OK: <summary>".
std::string summary(const RunConfig& config, int world_size);

}  // namespace wf::config
