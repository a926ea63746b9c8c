#pragma once
// Differentiable blocked (flash-style) attention on one device. The distributed strategies
// (ring, Ulysses, WallFacer) call the same kernels block by block.
#include "wallfacer/core/tensor.h"

namespace wf {

struct AttentionOptions {
  bool causal = false;
  // Global position of the first query / key of these blocks in the full sequence, so that a
  // block of a longer sequence is masked correctly (causal: key position <= query position).
  std::int64_t q_offset = 0;
  std::int64_t kv_offset = 0;
  double scale = 0;  // 0 → 1/sqrt(head_dim)
};

struct AttentionResult {
  Tensor out;  // [B, n_q, h, d]
  Tensor lse;  // [B, h, n_q] log-sum-exp of each query row (−inf when every key is masked)
};

// q [B, n_q, h, d], k and v [B, n_k, h_kv, d] with h_kv dividing h (GQA without repeating K/V).
// Both outputs are differentiable (a gradient arriving at lse is handled too).
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

// Attention's backward without its forward (activation checkpointing at the attention output):
// `saved` is what attention(q, k, v, options) returned earlier for the same values (taken
// without a graph). Returns saved.out and saved.lse as outputs of a new graph node on q, k and v
// whose backward is attention's; nothing is computed here. Wrong values in `saved` give wrong
// gradients silently: only the shapes are checked.
AttentionResult attention_replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                                 const AttentionResult& saved);

}  // namespace wf
