#pragma once
// TransformerBlock, pre-norm (GPT-2):  h = x + attn(norm1(x));  out = h + mlp(norm2(h)).
//
// Activation checkpointing per branch: a checkpointed branch keeps only its input and
// recomputes its inside during backward. The default plan for long sequences checkpoints the
// MLP and not the attention, so attention (the costly, communicating part) never runs twice.
// Checkpointing applies only when a graph is being recorded.
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
  bool checkpoint_attention = false;
  bool checkpoint_mlp = false;
  std::uint64_t seed = 0;
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& options);

  // x [B, T, d_model] → [B, T, d_model]; position_offset as in SelfAttention::forward.
  Tensor forward(const Tensor& x, std::int64_t position_offset = 0);

  SelfAttention& attention() { return *attn_; }
  MLP& mlp() { return *mlp_; }
  void set_checkpointing(bool attention, bool mlp);
  const TransformerBlockOptions& options() const { return options_; }

 private:
  TransformerBlockOptions options_;
  std::shared_ptr<Normalization> norm1_;
  std::shared_ptr<SelfAttention> attn_;
  std::shared_ptr<Normalization> norm2_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace wf::nn
