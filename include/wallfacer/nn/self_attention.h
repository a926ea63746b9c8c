#pragma once
// SelfAttention: one fused QKV projection, attention through a pluggable AttentionStrategy,
// then the output projection and residual dropout.
//
// The fused projection's output rows are grouped per kv head (Megatron's layout): for kv head
// g = 0 … n_kv_head−1, its G = n_head / n_kv_head query heads (heads g·G … g·G+G−1), then key
// head g, then value head g, each head_dim rows. A tensor-parallel factory splits qkv's rows
// into tp equal contiguous ranges, which are then whole groups: rank r computes query heads
// [r·n_head/tp, (r+1)·n_head/tp) with their own keys and values, attends locally (the strategy
// sees n_head/tp and n_kv_head/tp heads), and its slice of the output projection's input
// features is exactly those heads' channels (proj is row-parallel). tp must divide n_kv_head.
//
// Grouped-query attention: n_kv_head divides n_head; K/V are never repeated, the strategy
// maps query head i to key/value head i / (n_head / n_kv_head).
// Dropout is applied to the output projection only: the blocked attention kernels keep no
// probability matrix to drop from.
//
// Rotary position embedding (options.rope): q and k are rotated after the projection
// (wf::rope, rotate-half convention) by each token's position: its global one, or with packed
// documents its position inside its document.
#include <cstdint>
#include <memory>

#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/nn/token_positions.h"

namespace wf::nn {

struct SelfAttentionOptions {
  std::int64_t d_model = 0;
  std::int64_t n_head = 0;
  std::int64_t n_kv_head = 0;  // 0 → n_head (multi-head attention)
  bool causal = true;
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  double out_init_std = 0.0;  // output projection (writes to the residual stream); 0 → init_std
  WeightInit weight_init = WeightInit::normal;  // xavier_uniform ignores the stds (DiT)
  bool rope = false;
  double rope_theta = 10000.0;
  std::uint64_t seed = 0;
  // Builds qkv (column role: tensor parallelism splits it by whole kv-head groups) and proj
  // (row role); null: the plain layers.
  std::shared_ptr<const LayerFactory> layers = nullptr;
};

class SelfAttention : public Module {
 public:
  explicit SelfAttention(const SelfAttentionOptions& options);

  // x [B, T, d_model] → [B, T, d_model]. position_offset: the global position of x's first
  // token when x is a contiguous block of a longer sequence (chunked inference); the strategy
  // gets it as AttentionOptions::q_offset/kv_offset and rope uses positions offset … offset+T−1.
  Tensor forward(const Tensor& x, std::int64_t position_offset = 0);
  // where.positions [T] i64 (or i32): the global position of each token of x, in any order (zigzag
  // and other sequence-parallel layouts), or [B, T] per row (packed documents: positions inside
  // each document). Rope uses them; the strategy gets offsets 0, since a sequence-parallel
  // strategy knows its layout and masks by it, and where.documents as its doc_bounds.
  Tensor forward(const Tensor& x, const TokenPositions& where);

  // forward in two halves around the strategy, for callers that run it themselves
  // (TransformerBlock's checkpointing at the attention output):
  //   project: x [B, T, d_model] → q [B, T, h, hd], k and v [B, T, h_kv, hd], q and k rotated
  //            by `positions` ([T], or [B, T] per row) when rope is on (undefined positions are
  //            allowed when it is off);
  //   output:  attention out [B, T, h, hd] → proj → dropout → [B, T, d_model].
  using Heads = AttentionHeads;
  Heads project(const Tensor& x, const Tensor& positions);
  Tensor output(const Tensor& attention_out);
  // The strategy's options for tokens whose first global position is `position_offset`.
  AttentionOptions attention_options(std::int64_t position_offset) const;
  // The strategy's options for tokens laid out as `where` says (offsets 0, see forward): its
  // documents, if any, as doc_bounds.
  AttentionOptions attention_options(const TokenPositions& where) const;
  // What forward(x, position_offset) rotates by: offset … offset+tokens−1 (i64) when rope is
  // on, else undefined (nothing to build); on `device` (x's).
  Tensor contiguous_positions(std::int64_t position_offset, std::int64_t tokens, Device device = Device::cpu()) const;

  // The strategy may be swapped at any time (e.g. after the process grid is set up).
  void set_strategy(std::shared_ptr<AttentionStrategy> strategy);
  const std::shared_ptr<AttentionStrategy>& strategy() const { return strategy_; }

  std::int64_t head_dim() const { return options_.d_model / options_.n_head; }
  // The heads this rank computes: all of them, or n_head / tp and n_kv_head / tp under a
  // tensor-parallel factory.
  std::int64_t local_heads() const { return options_.n_head / tp_; }
  std::int64_t local_kv_heads() const { return options_.n_kv_head / tp_; }
  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  const SelfAttentionOptions& options() const { return options_; }

 private:
  Tensor run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options);

  SelfAttentionOptions options_;
  std::int64_t tp_ = 1;  // the factory's tensor_parallel_size()
  std::shared_ptr<Linear> qkv_;
  std::shared_ptr<Linear> proj_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<AttentionStrategy> strategy_;
};

// The parameters of a SelfAttention of these options (whole, as one process holds them), without
// building it: qkv [(h + 2·h_kv)·hd, d] and proj [d, d], with their biases.
double self_attention_parameter_count(const SelfAttentionOptions& options);

// Sets `strategy` on every SelfAttention inside `root` (root included); returns how many.
int set_attention_strategy(Module& root, const std::shared_ptr<AttentionStrategy>& strategy);

}  // namespace wf::nn
