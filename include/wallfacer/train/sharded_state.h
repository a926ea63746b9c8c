#pragma once
// Whole tensors from shards and back, by each parameter's nn::ParameterShard, and the pieces of
// a rank's training state that distributed checkpoints save and load.
//
// Whole tensors: gather_whole_state all-gathers each split parameter (and its AdamW moments) over
// the group its shard names, every rank of that group getting the whole, unpadded tensor under its
// global name; load_whole_state cuts each rank's slice back out. The optimizer's entries are keyed
// by the parameter's name, "<parameter>.<field>" (AdamW's step, exp_avg, exp_avg_sq), not by its
// position, so neither the order nor the split of the parameters is baked in: format 3
// checkpoints held these whole tensors, written by world rank 0.
//
// Gathering the whole model on one group is what a model that fits one rank's memory can afford;
// the trainer's checkpoints no longer do it: they are distributed (format 4, below and
// distributed_checkpoint.h), each rank writing and reading its own pieces. The whole-tensor
// functions stay for tests and tools that want a single-process view.
#include <string_view>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/nn/parameter_shard.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/sharded_tensor.h"

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

// ---- distributed checkpoints (format 4, distributed_checkpoint.h) ---------------------------
// Each rank describes its own pieces instead of gathering whole tensors: the model's parameters
// as this rank's tensor-parallel slices, the optimizer's fields as its slots.

class CheckpointReader;

// The slots of an AdamW built over model.parameters() (no ZeRO): slot i is the whole local
// parameter i, written by replica_rank 0, and for a parameter not split over tp by tp_rank 0 only.
std::vector<OptimizerSlot> whole_parameter_slots(const nn::Module& model, int replica_rank, int tp_rank);

// This rank's pieces of the training state: every model tensor (model.state_dict()'s names) as
// its whole tp slice, written by replica_rank 0 (and tp_rank 0 for one not split over tp), its
// data the live tensor; per slot i (AdamW parameter i) that has been updated,
// "<name>.exp_avg" and "<name>.exp_avg_sq" as the slot's piece (copies, slot.writer) and the
// scalar "<name>.step", written by the slot that starts the parameter's first slice.
ShardedStateDict sharded_state_dict(nn::Module& model, AdamW& optimizer, const std::vector<OptimizerSlot>& slots,
                                    int replica_rank, int tp_rank);

// Loads this rank's pieces from `reader`: the model's in place; the optimizer's into temporaries
// that then replace AdamW's state (load_state_dict). A parameter the checkpoint holds no
// optimizer state for (never updated when it was written) gets none. wf::Error naming the
// tensor when the checkpoint does not fit: a key missing or extra, another shape or dtype.
// A checkpoint tensor the model lacks is refused too (another model), unless the model is not
// whole (`whole_model` false: a pipeline stage, which holds only its own blocks' tensors).
void load_sharded_state(CheckpointReader& reader, nn::Module& model, AdamW& optimizer,
                        const std::vector<OptimizerSlot>& slots, int replica_rank, int tp_rank, bool whole_model = true);

}  // namespace wf::train
