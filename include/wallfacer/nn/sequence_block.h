#pragma once
// SequenceBlock: one of the repeated layers of a model over a sequence of tokens, the unit a
// decoder stacks (models::DecoderLM) and a pipeline stage holds a contiguous range of.
// nn::TransformerBlock (pre-norm, sequential) is one; a model family passes its own
// (models::DecoderOptions::block, docs/adding-a-model.md) built from the same nn parts: weights
// from the LayerFactory with their roles (tensor parallelism), attention through SelfAttention's
// strategy (sequence parallelism) and run_attention_block (the attention-output checkpoint).
#include "wallfacer/nn/module.h"
#include "wallfacer/nn/token_positions.h"

namespace wf::nn {

class SequenceBlock : public Module {
 public:
  using Module::Module;
  // x [B, T, d_model] → [B, T, d_model]. where.positions [T · parts] i64: the global position of
  // every token the block attends over (under activation sharding x holds 1/parts of them, parts =
  // LayerFactory::activation_token_parts(); under sequence parallelism they are not 0..T−1), or
  // [B, T · parts] per row with packed documents, whose bounds (where.documents) the block hands
  // its attention strategy (SelfAttention::attention_options(where)).
  virtual Tensor forward(const Tensor& x, const TokenPositions& where) = 0;
};

}  // namespace wf::nn
