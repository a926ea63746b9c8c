#pragma once
// Whole tensors from shards and back, by each parameter's nn::ParameterShard: how checkpoints
// hold the state of a model that tensor parallelism has cut up.
//
// A checkpoint stores every parameter and its optimizer state as the WHOLE, unpadded tensor
// under its global name, whatever layout wrote it: writing gathers each shard over the group it
// is split over (every rank of that group gets the whole; the Trainer gathers on world rank 0's
// group only, and rank 0 writes), loading cuts each rank's slice back out. A checkpoint written at tp 2 therefore loads at tp 1, 4 or 8, and one
// written by a single process loads into any layout. The optimizer's entries are keyed by the
// parameter's name, "<parameter>.<field>" (AdamW's step, exp_avg, exp_avg_sq), not by its
// position, so neither the order nor the split of the parameters is baked in.
//
// Gathering the whole model on one group is what a model that fits one rank's memory can afford;
// the sharded (per-rank files) checkpoints of ZeRO and pipeline parallelism replace it there.
#include <string_view>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/nn/parameter_shard.h"
#include "wallfacer/train/optimizer.h"

namespace wf::train {

// The whole, unpadded tensor of which `local` is this rank's `shard`, all-gathered over the
// shard's group in `grid` (collective over that group); a replicated tensor is returned as is.
Tensor gather_whole(const Tensor& local, const nn::ParameterShard& shard, comm::CommGrid& grid);
// This rank's slice of `whole` (the unpadded tensor) as `shard` says, padding zeros included.
// wf::Error naming `name` when whole's shape is not shard.unpadded_shape().
Tensor local_slice(const Tensor& whole, const nn::ParameterShard& shard, std::string_view name);

// A model's and its optimizer's state as whole tensors (the checkpoint's content). The optimizer
// must have been built over model.parameters(), in that order.
struct WholeState {
  nn::StateDict model;      // model.state_dict()'s names, whole tensors
  nn::StateDict optimizer;  // "<parameter name>.<field>"
};
WholeState gather_whole_state(const nn::Module& model, const AdamW& optimizer, comm::CommGrid& grid);
// Loads `state` into this rank's shards of the model and the optimizer. wf::Error (nothing
// loaded) listing every entry that names no parameter or does not have its whole shape.
void load_whole_state(const WholeState& state, nn::Module& model, AdamW& optimizer);

}  // namespace wf::train
