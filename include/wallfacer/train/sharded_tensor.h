#pragma once
// ShardedTensor: one rank's piece of one global tensor of the training state, as checkpoints
// see it (after Megatron-Core's dist_checkpointing ShardedTensor with a flattened range).
//
// A parameter (or one of its optimizer fields) is a global tensor under a global name. Tensor
// parallelism gives a rank one slice of it (nn::ParameterShard: a dim, parts, index, the padded
// global shape); ZeRO then gives the rank a contiguous range of that slice's row-major elements.
// A piece is therefore (key, shard, [flat_begin, flat_end)). Replicas hold the same pieces: exactly
// one of them is the `writer`; every rank loads the pieces it holds, whoever wrote them, so a
// checkpoint written under one layout loads under any other (train/distributed_checkpoint.h).
//
// The global tensor a checkpoint stores is the UNPADDED one (shard.unpadded_shape()): padding
// rows of a split vocabulary are dropped on save and loaded as zeros.
#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/parameter_shard.h"

namespace wf::train {

struct ShardedTensor {
  std::string key;           // "blocks.0.attn.qkv.weight", or "<parameter>.<field>" for optimizer state
  nn::ParameterShard shard;  // the tensor-parallel slice this rank holds (replicated: the whole tensor)
  std::int64_t flat_begin = 0;  // of that slice's elements in row-major order: [flat_begin, flat_end)
  std::int64_t flat_end = 0;
  bool writer = true;  // false: a replica holds the same piece and writes it; this rank only loads it
  // This rank's storage for the piece, contiguous, flat_end - flat_begin elements (any shape):
  // a save reads it, a load writes it in place.
  Tensor data;

  std::int64_t numel() const { return flat_end - flat_begin; }
};
using ShardedStateDict = std::vector<ShardedTensor>;

// What one AdamW parameter of this rank is in global terms: the elements [flat_begin, flat_end)
// of the tensor-parallel slice `shard` of parameter `name`. Without ZeRO a slot is the whole
// local parameter; under ZeRO it is the part of it this rank's optimizer updates.
struct OptimizerSlot {
  std::string name;
  nn::ParameterShard shard;
  std::int64_t flat_begin = 0;
  std::int64_t flat_end = 0;
  bool writer = true;  // this rank writes the slot's optimizer state (one replica does)
};

}  // namespace wf::train
