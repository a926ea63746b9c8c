#pragma once
// wf::train::Trainer: the training loop of a run configuration over a communicator grid.
//
// One optimizer step (train_step):
//   for each of grad_accum_steps microbatches: this rank's slice of the microbatch (the data
//     loader shards it for dp and for the attention strategy's sp layout) → the model's loss
//     SUM and element count (models::LossSum) → backward of the sum (sequence-parallel
//     attention communicates here);
//   all-reduce the gradients of the replicated weights over dp × sp (bucketed, started during
//     the last microbatch's backward as the buckets' gradients become final), and the loss sums
//     and counts; scale the gradients by 1 / (global count) (Megatron's per-token loss);
//   global grad-norm clipping, warmup + cosine learning rate, AdamW.
// Normalising once by the count of the whole global batch makes the result the exact mean over
// counted elements (ignored targets excluded), for any dp, sp and accumulation: the loss is
// never averaged twice or scaled by the number of ranks (tests/dist/test_train_parity.cpp).
//
// fit() adds periodic validation, metrics (metrics.jsonl, progress line with ETA), and
// checkpoints (every checkpoint.every steps and at the end) that resume() restores exactly:
// weights, AdamW state, the step (which fixes the data order and the learning rate) and the RNG,
// so a resumed run reproduces the losses of an uninterrupted one bit for bit.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/batch_stager.h"
#include "wallfacer/train/grad_sync.h"
#include "wallfacer/train/loss_totals.h"
#include "wallfacer/train/lr_schedule.h"
#include "wallfacer/train/metrics.h"
#include "wallfacer/train/microbatch_graph.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/peak_flops.h"
#include "wallfacer/train/sharded_tensor.h"

namespace wf::train {

class CheckpointStore;
class PipelineRunner;
class ReplicaGradients;

// The token source a run config names: its training (or validation) token file, or for
// data.source synthetic seeded random tokens over the model's vocabulary, enough that no sample
// repeats within the run (the validation stream never repeats the training one). Null for a
// validation file the config does not give.
std::shared_ptr<data::TokenSource> open_token_source(const config::RunConfig& config, bool validation);

// This rank's traffic counters by group: everything, point-to-point only, collectives only.
struct TrafficSnapshot {
  std::map<std::string, comm::Traffic> all, p2p, collectives;
  static TrafficSnapshot take();
  // Adds what was counted between `from` and `to` (e.g. a checkpoint's gathers), so that
  // differences against this baseline leave it out.
  void advance(const TrafficSnapshot& from, const TrafficSnapshot& to);
};

struct StepResult {
  std::int64_t step = 0;  // the step just completed (1-based)
  double loss = 0;        // mean over the global batch's target tokens
  double grad_norm = 0;   // before clipping
  double lr = 0;
  double seconds = 0;
};

class Trainer {
 public:
  // Builds the model from the registry (model.name), the data sources from the data section
  // (the model's registered batch source, or for a language model a token file or seeded random
  // tokens when data.source is synthetic), AdamW and the schedule. Throws wf::Error (the same on every rank) for what the trainer does not support.
  Trainer(const config::RunConfig& config, comm::CommGrid& grid);
  // The same with a given model and sources (tests, embedding programs). `val` may be null.
  Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model,
          std::shared_ptr<data::TokenSource> train, std::shared_ptr<data::TokenSource> val);
  // The same with any model's batch sources (batch_source.h). `val` may be null.
  Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model,
          std::unique_ptr<models::BatchSource> train, std::unique_ptr<models::BatchSource> val);
  ~Trainer();

  // Restores the newest valid checkpoint of checkpoint.dir (every rank loads the same one);
  // false when there is none. Call before fit().
  bool resume();
  // Trains from step() to train.steps; with stop_after > 0, returns once that many steps are
  // done (as if the job had been killed there, without the end-of-run checkpoint).
  void fit(std::int64_t stop_after = 0);
  // One optimizer step: compute_gradients() then apply_gradients(). Reads its loss and gradient
  // norm to the host (one host synchronisation); fit() reads them once per logged step instead, so
  // there a run past train.max_skipped_steps stops at the next logged step (or checkpoint).
  StepResult train_step();
  // The microbatches of step() + 1: forward, backward, gradient all-reduce over dp × sp. Returns
  // the step's loss; every parameter's grad then holds the full gradient of that mean loss.
  // Reads the loss to the host (one host synchronisation): fit() uses the form below.
  double compute_gradients();
  // The same, the loss a [1] f64 tensor on train.device: nothing in it reads the host.
  Tensor compute_gradients_on_device();
  // Where the step runs (train.device).
  // This rank's device (train.device resolved: train::resolve_train_device).
  Device device() const { return device_; }
  // How compute_gradients reduces over the replicas (replica_gradients.h, with parallel.zero's
  // stage): overlapped with the backward (the default) or after it, in buckets of `bucket_bytes`.
  // Both give the same gradients bit for bit. Rebuilds the optimizer: call before resume and fit.
  void set_grad_overlap(bool overlap, std::int64_t bucket_bytes = kDefaultBucketBytes);
  // The gradients and their reduction (its statistics, ZeRO layout).
  const ReplicaGradients& gradients() const { return *grads_; }
  // Per optimizer parameter, the piece of which global parameter it is (checkpoints).
  std::vector<OptimizerSlot> optimizer_slots() const;
  // Sets the gradients to zero (apply_gradients does it after each update).
  void zero_grad();
  // Clips the gradients, sets the step's learning rate, updates and clears the gradients. A
  // non-finite gradient norm skips the update (decided on the device); this reads the norm (one
  // host synchronisation) and train.max_skipped_steps of those in a row throw wf::UserError on
  // every rank (the norm is the same on all).
  StepResult apply_gradients(double loss);
  // Mean loss over train.eval_batches validation batches (no graph, no update).
  double evaluate();
  // Saves a checkpoint of step() (collective); returns the directory it went to. Weights that are
  // not all finite are never saved: every rank throws wf::UserError and the checkpoints stay.
  std::string save_checkpoint();
  // Asked at every step boundary of fit() (`train` answers its SIGINT / SIGTERM handler's flag):
  // a nonzero answer on any rank makes every rank save a checkpoint and return from fit() at that
  // boundary. The ranks agree through an all-reduce of one number per step (Megatron's exit-signal
  // check), left out of the logged traffic; without a poll there is none.
  void set_stop_request(std::function<int()> poll) { stop_request_ = std::move(poll); }
  // What the last fit() did: the numbers of the summary `train` prints at the end.
  struct FitSummary {
    std::int64_t first_step = 0, last_step = 0;  // the steps trained (first_step > last_step: none)
    double first_loss = 0, last_loss = 0;
    double best_val_loss = -1;  // < 0: no validation ran
    std::int64_t best_val_step = 0;
    double wall_seconds = 0;        // fit() from start to end, validation and checkpoints included
    std::int64_t tokens = 0;        // trained, all ranks
    std::string last_checkpoint;    // the directory of the newest checkpoint saved ("" when none)
    int stopped_for = 0;            // the stop request's answer (the largest over the ranks); 0: ran to its end
  };
  const FitSummary& fit_summary() const { return summary_; }

  std::int64_t step() const { return step_; }
  models::Model& model() { return *model_; }
  // Where the training microbatches come from (tokens, or a model's own batch source).
  const models::BatchSource& batches() const { return *train_batches_; }
  AdamW& optimizer() { return *optimizer_; }
  const config::RunConfig& config() const { return config_; }
  // The tokens (all ranks) per optimizer step.
  std::int64_t tokens_per_step() const;
  // Every completed step of this process, in order (after fit() or train_step(): their losses read).
  const std::vector<StepResult>& history() const { return history_; }
  // With pp > 1: what runs this rank's part of each step's schedule (its measured timeline and
  // bubble); null without a pipeline.
  const PipelineRunner* pipeline() const { return pipeline_.get(); }
  // With train.cuda_graph: what captures and replays the micro batches; null without one.
  const MicrobatchGraph* microbatch_graph() const { return graph_.get(); }

 private:
  // The config constructor's second step: `model` with the run's own sources.
  Trainer(const config::RunConfig& config, comm::CommGrid& grid, std::shared_ptr<models::Model> model);
  void check_supported() const;
  // pp > 1: checks that the model holds this rank's stage and builds the schedule's runner.
  void set_up_pipeline();
  // The optimizer pieces of parameters shared with another stage (the tied embedding): their
  // gradients summed over pp.embedding, after the replica reduction and before the update.
  void sum_shared_gradients();
  // Loss totals of the step's microbatches on this rank (the last stage's, under pp), on the device.
  DeviceLossTotals run_microbatches();
  // A source's batch, on the step's device.
  // source's batch on the device; the training source's next micro batch is copied meanwhile.
  models::Batch batch(const models::BatchSource& source, std::int64_t index, std::int64_t micro);
  // A step whose loss and gradient norm stay on the device until read_pending_steps (history_
  // holds the rest).
  StepResult train_step_on_device();
  // Clips, updates (on the device: not when the norm is not finite) and clears the gradients;
  // fills `result` but its loss and norm, and returns the norm, an f64 scalar on the device.
  Tensor update(StepResult& result);
  // A step whose norm is not finite was skipped: warns, and throws wf::UserError when
  // train.max_skipped_steps steps in a row were. Called in step order, as the norms are read.
  void count_skipped_step(const StepResult& result);
  // Fills the losses and gradient norms of history_'s last steps from pending_ (one host read for
  // all) and counts their skipped updates.
  void read_pending_steps();
  // Whether fit() logs `step` (validated: a validation ran at it).
  bool logs_step(std::int64_t step, bool validated) const;
  // pp > 1: this rank's latest step timeline to <log.dir>/pp-timeline/pp-timeline-rank<R>.json
  // (scripts/plot-pipeline.sh draws them as a Gantt chart).
  void write_pipeline_timeline() const;
  // Where the dropout streams stand: the default generator's and the tensor-parallel one's.
  struct RngOffsets {
    std::uint64_t replicated = 0;
    std::uint64_t tensor_parallel = 0;
  };
  void seed_generators(const RngOffsets& offsets);
  // Logs history_'s last step when it is due (reading the pending losses).
  void log_step(double val_loss);
  int agreed_stop_request();
  // Begins a logging interval whose traffic counts from `traffic`.
  void start_interval(TrafficSnapshot traffic);

  config::RunConfig config_;
  Device device_;
  comm::CommGrid& grid_;
  comm::Group& replicas_;  // dp × sp: the ranks that hold the same weights (or weight shards)
  std::shared_ptr<models::Model> model_;
  std::vector<Tensor> params_;
  std::vector<nn::ParameterShard> shards_;  // shards_[i]: where params_[i] sits in its whole tensor
  std::unique_ptr<ReplicaGradients> grads_;
  std::unique_ptr<PipelineRunner> pipeline_;
  std::vector<std::size_t> shared_params_;  // indices into params_ of pipeline_shared_parameters()
  std::vector<char> counted_in_norm_;       // per optimizer piece: 0 for a copy another stage counts
  std::vector<nn::ParameterShard> optimizer_shards_;  // [i]: the shard of optimizer parameter i's parameter
  std::unique_ptr<AdamW> optimizer_;
  CosineSchedule schedule_;
  std::unique_ptr<BatchStager> stager_;
  std::unique_ptr<MicrobatchGraph> graph_;  // train.cuda_graph on a device that records graphs
  std::unique_ptr<models::BatchSource> train_batches_;
  std::unique_ptr<models::BatchSource> val_batches_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<MetricsLog> metrics_;
  std::int64_t step_ = 0;
  std::vector<StepResult> history_;
  // On the device, [1] each: the loss and the gradient norm of each of history_'s last steps, not
  // yet read (loss, norm, loss, norm, ...).
  std::vector<Tensor> pending_;
  std::int64_t skipped_in_a_row_ = 0;  // read steps, up to the last read, whose update was skipped

  // Accumulated over the current logging interval.
  struct Interval {
    std::int64_t steps = 0;
    double seconds = 0;
    TrafficSnapshot traffic;  // at the interval's start
    double pp_wait = 0, pp_compute = 0;  // this rank's pipeline waits and compute, summed
    std::int64_t host_syncs = host_sync_count();        // at the interval's start
    std::int64_t staging_syncs = staging_sync_count();  // the same, MPI's staging of device tensors
  } interval_;
  double run_seconds_ = 0;
  PeakFlops peak_;  // measured (or configured) when fit() starts
  std::function<int()> stop_request_;
  FitSummary summary_;
};

}  // namespace wf::train
