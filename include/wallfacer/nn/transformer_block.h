#pragma once
// TransformerBlock, pre-norm (GPT-2):  h = x + attn(norm1(x));  out = h + mlp(norm2(h)).
//
// Activation checkpointing (applies only while a graph is being recorded, and x requires grad):
//  - checkpoint_attention_output, the placement of the WallFacer paper (§4.6, after
//    DistFlashAttn): the whole block becomes one graph node that keeps only its input x, the
//    attention output and its log-sum-exp. Backward recomputes everything around attention
//    (norm1 → qkv → rope before it; proj → dropout → residual → norm2 → MLP → residual after it,
//    with the same dropout masks) and replays attention from the saved out and lse through
//    AttentionStrategy::replay: attention (the costly, communicating part) runs once per step.
//  - checkpoint_mlp: only the norm2 + MLP branch keeps just its input and is recomputed. It has
//    no effect when checkpoint_attention_output is on (the MLP is recomputed anyway).
#include <cstdint>
#include <memory>

#include "wallfacer/nn/mlp.h"
#include "wallfacer/nn/norm.h"
#include "wallfacer/nn/self_attention.h"

namespace wf::nn {

struct TransformerBlockOptions {
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // 0 → n_head
  std::int64_t d_ff = 0;       // 0 → 4·d_model
  Activation activation = Activation::gelu;
  NormType norm = NormType::layer_norm;
  double norm_eps = 1e-5;
  bool causal = true;
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.0;  // the two residual projections; 0 → init_std
  bool rope = false;  // rotary position embedding on q and k (SelfAttentionOptions::rope)
  double rope_theta = 10000.0;
  bool checkpoint_attention_output = false;
  bool checkpoint_mlp = false;
  std::uint64_t seed = 0;
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& options);

  // x [B, T, d_model] → [B, T, d_model]; position_offset and positions as in
  // SelfAttention::forward (positions [T] i64: each token's global position, any layout).
  Tensor forward(const Tensor& x, std::int64_t position_offset = 0);
  Tensor forward(const Tensor& x, const Tensor& positions);

  SelfAttention& attention() { return *attn_; }
  MLP& mlp() { return *mlp_; }
  void set_checkpointing(bool attention_output, bool mlp);
  const TransformerBlockOptions& options() const { return options_; }

 private:
  class AttentionOutputCheckpoint;
  Tensor run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options);
  // The part of the block after attention: x + attn.output(out) → h; h + mlp(norm2(h)).
  Tensor after_attention(const Tensor& x, const Tensor& attention_out, bool checkpoint_mlp);

  TransformerBlockOptions options_;
  std::shared_ptr<Normalization> norm1_;
  std::shared_ptr<SelfAttention> attn_;
  std::shared_ptr<Normalization> norm2_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace wf::nn
