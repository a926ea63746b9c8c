#pragma once
// One layout of a run config trained a few steps on this mpirun world and measured: the step time,
// per-rank memory by kind and peaks, bytes per process group beside train/step_traffic.h's
// prediction, and the pipeline's bubble. Shared by `wallfacer bench layout` (every layout of the
// world) and `wallfacer tune --profile` (the top predicted ones).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/train/replica_gradients.h"

namespace wf::cli {

struct GroupRow {
  std::string group;
  std::int64_t measured = 0;            // per step, summed over ranks
  std::optional<std::int64_t> predicted;  // per step, summed over ranks
  bool exact = false;                   // every rank's count equals its prediction
};

struct LayoutMeasurement {
  config::ParallelSection layout;  // the layout measured (the config's parallel section)
  std::int64_t tokens_per_step = 0;
  double flops_per_token = 0;  // the model's training FLOPs (Model::train_flops_per_token)
  double step_seconds = 0;
  // Per rank, the max over ranks.
  std::int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0, activation_bytes = 0, step_peak_bytes = 0;
  std::int64_t persistent_gradient_bytes = 0;  // gradient_bytes without ZeRO-2's staging pool
  std::vector<GroupRow> groups;  // the groups that sent or were predicted to send something
  // Rank 0's gradient buckets in the last measured step (the same layout on every replica), and
  // how many started during the backward rather than at its end: how much ZeRO-2 can free as it
  // goes (a bucket waits in its staging buffer until every bucket before it has started).
  train::ReplicaGradients::Stats buckets;
  // pp > 1: the microbatches m, the measured bubble (every rank's waiting over its compute, summed
  // over ranks and steps) and the schedule's ideal one; per stage (max over its ranks) the step
  // peak and one microbatch's forward through the stage's chunks; the job's ranks per core.
  std::int64_t microbatches = 1;
  double bubble = 0, ideal_bubble = 0;
  int cores = 0, threads = 0;  // the job's cores, OpenMP threads per rank (rank 0's)
  std::vector<std::int64_t> stage_step_peak_bytes, stage_microbatch_bytes;
  double ranks_per_core() const { return double(layout.dp * layout.tp * layout.pp * layout.sp) / double(cores); }
  bool traffic_exact() const {
    return std::all_of(groups.begin(), groups.end(), [](const GroupRow& g) { return !g.predicted || g.exact; });
  }
};

// `config` as a measurement runs it: synthetic tokens (no data files), one warm-up step and
// `steps` measured ones, no validation passes.
config::RunConfig measurement_config(config::RunConfig config, int steps);

// The smallest machine memory of the job's ranks (a collective over the world): what `wallfacer
// train` checks a config against, so every rank reaches the same verdict.
double job_machine_memory_bytes();

// Trains `config` (a measurement_config that config::validate accepts for this world) on every
// rank of the world: one warm-up step, then `steps` measured ones, each after a barrier.
//   - step time: the slowest rank's, median over the measured steps;
//   - per-rank memory, the max over ranks: this rank's parameter tensors, the bytes it holds for
//     gradients (ReplicaGradients::gradient_bytes: the flat buffer, the ZeRO shard, ZeRO-2's
//     staging pool), AdamW's state; the activations: the allocator's peak during one microbatch's
//     forward above what was live before it; the step peak: the allocator's peak during a whole
//     step above what was live before it;
//   - bytes sent per step on each group, summed over ranks, beside their prediction;
//   - with pp > 1: the bubble beside the schedule's ideal, per-stage peaks, the job's cores.
LayoutMeasurement measure_layout(const config::RunConfig& config, int steps);

}  // namespace wf::cli
