#pragma once
// ParameterShard: which part of a parameter this rank holds. Tensor parallelism splits some
// weights over the ranks of a group (Megatron's column- and row-parallel linears); whoever
// consumes a state dict (a checkpoint writer, a consolidating loader, a test) needs to know,
// for every parameter, the shape of the whole tensor and where this rank's slice sits in it.
//
// A shard is one of `parts` equal, contiguous slices along one dim: slice `index` covers
// [index·n, (index+1)·n) of dim `dim`, n = global_shape[dim] / parts, and every other dim is
// whole. Equal slices are what the TP layers need (out/tp rows, in/tp columns) and they keep
// the description to a few integers. A replicated parameter (dim = -1, the default) is whole
// on every rank; its global shape is its own.
//
// A parameter may also be used on part of the data only, so that after backward each rank's
// gradient is a partial sum of the whole one: with activations sharded by tokens over tp
// (Megatron's sequence parallelism), a norm's weight or a row-parallel layer's bias sees only
// this rank's tokens. `partial_gradient_group` names the group whose ranks' gradients must be
// summed before the optimizer steps (parallel::reduce_partial_gradients does it).
#include <cstdint>
#include <string>

#include "wallfacer/core/shape.h"

namespace wf::nn {

struct ParameterShard {
  std::string group;   // the process group the parameter is split over ("" when replicated)
  int dim = -1;        // the split dim; -1: replicated
  int parts = 1;       // slices along `dim` (the group's size)
  int index = 0;       // this rank's slice (its rank in the group)
  Shape global_shape;  // the whole tensor's shape
  // A dim padded to split evenly (a vocabulary of 50257 rows over tp 2 is split as 50258): its
  // real extent, past which the global tensor holds padding zeros that a consolidated
  // (checkpointed) tensor drops. 0: not padded.
  std::int64_t unpadded_length = 0;
  std::string partial_gradient_group;  // the group its gradient is partial over ("" when whole)

  bool is_sharded() const { return dim >= 0; }
  // The extent of this rank's slice along `dim`, and where it starts (0 / whole when replicated).
  std::int64_t length() const;
  std::int64_t start() const { return is_sharded() ? index * length() : 0; }
  // This rank's shape: the global shape with `dim` divided by `parts`.
  Shape local_shape() const;
  // The shape of the whole tensor without padding (what a single process holds).
  Shape unpadded_shape() const;

  // A whole parameter of `shape`.
  static ParameterShard replicated(Shape shape);
  // Slice `index` of `parts` along `dim` (negative: from the end) of a `global_shape` tensor
  // split over `group`; wf::Error unless the dim exists and its extent divides into `parts`.
  static ParameterShard split(std::string group, const Shape& global_shape, int dim, int parts, int index);
  // The same for a `global_shape` whose `dim` is padded past its real extent `unpadded_length`.
  static ParameterShard split_padded(std::string group, const Shape& global_shape, int dim, int parts, int index,
                                     std::int64_t unpadded_length);
};

// "whole [64, 16]" or e.g. "dim 0 slice 1/4 of [64, 16] over tp", then ", gradient partial over tp"
// when it is, for messages.
std::string shard_str(const ParameterShard& shard);

}  // namespace wf::nn
