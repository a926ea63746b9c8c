#pragma once
// The plug-in point for attention. SelfAttention projects Q/K/V and hands them to a strategy;
// the strategy decides where and how attention runs: LocalAttention on this device, and later
// the sequence-parallel strategies (ring, Ulysses, WallFacer multi-ring), which hold a slice
// of the sequence and communicate K/V. Models never know which strategy runs.
#include <memory>
#include <string>

#include "wallfacer/ops/attention.h"

namespace wf::nn {

// The query, key and value heads a block hands to its attention strategy.
struct AttentionHeads {
  Tensor q, k, v;
};

class AttentionStrategy {
 public:
  virtual ~AttentionStrategy();
  // q [B, n_q, h, d], k and v [B, n_k, h_kv, d] (h_kv divides h), as held by this rank;
  // options.q_offset/kv_offset give the global position of this rank's first token. Returns
  // out [B, n_q, h, d] and lse [B, h, n_q], both differentiable.
  virtual AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options) = 0;

  // Attention's backward without its forward: `saved` is what forward(q, k, v, options)
  // returned earlier for the same values of q, k and v (taken without recording a graph).
  // Returns saved.out and saved.lse as outputs of a new graph node on q, k and v whose backward
  // is this strategy's attention backward, and computes no attention. Activation checkpointing
  // at the attention output (the paper's placement) replays a block around it, so attention
  // never runs twice. The default throws wf::Error naming the strategy.
  virtual AttentionResult replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                                 const AttentionResult& saved);

  virtual std::string name() const = 0;
};

// Attention over the tokens this process holds, with wf::attention.
class LocalAttention final : public AttentionStrategy {
 public:
  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) override;
  AttentionResult replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                         const AttentionResult& saved) override;  // wf::attention_replay
  std::string name() const override { return "local"; }
};

}  // namespace wf::nn
