#pragma once
// Activation checkpointing at the attention output (the WallFacer paper's placement, §4.6, after
// DistFlashAttn), for any block that is "project → attention → the rest":
//
//   outputs = after(inputs, strategy.forward(before(inputs)).out)
//
// As one graph node the block keeps only its inputs, the attention output and its log-sum-exp.
// Backward recomputes `after` (with the same dropout draws) to get d_out and the inputs' and
// weights' gradients through it, then recomputes `before` from fresh leaves and replays the
// attention from the saved out and lse (AttentionStrategy::replay): attention, the costly and
// communicating part, runs once per step. A block may have several inputs (DiT's conditioned
// block takes x and the conditioning): each input's gradient is the sum of what `before` and
// `after` give it.
//
// TransformerBlock uses it; docs/nn.md ("Checkpointing") shows how a new block does.
#include <functional>
#include <memory>

#include "wallfacer/autograd/node.h"
#include "wallfacer/nn/attention_strategy.h"

namespace wf::nn {

struct AttentionSplit {
  // inputs → q, k, v (the block's norm and projections). Recomputed in backward.
  std::function<AttentionHeads(const autograd::TensorList& inputs)> before;
  // inputs and the attention output → the block's outputs. Recomputed in backward with every
  // random stream where forward left it (rng_snapshot), so dropout draws the same masks.
  std::function<autograd::TensorList(const autograd::TensorList& inputs, const Tensor& attention_out)> after;
  std::shared_ptr<AttentionStrategy> strategy;
  AttentionOptions options;
};

// The block's outputs. With `checkpoint` and a graph being recorded (grad mode on and an input
// that requires grad) through one checkpoint node as above; otherwise directly, recording the
// usual graph. `split` is kept by the node until its backward.
autograd::TensorList run_attention_block(AttentionSplit split, const autograd::TensorList& inputs, bool checkpoint);

}  // namespace wf::nn
