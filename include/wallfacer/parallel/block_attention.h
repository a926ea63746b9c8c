#pragma once
// Attention between token runs: the building block every sequence-parallel strategy uses.
// A rank's queries and a K/V block are each held as a list of runs of global positions
// (sequence_layout.h). Each (query run, key run) pair is classified (block_mask): skipped when
// fully masked (never computed), computed with a causal mask at its global offsets on the
// diagonal, without a mask otherwise. Plain tensors, no autograd: the strategies' autograd
// Functions call these in their forward and backward.
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/parallel/sequence_layout.h"

namespace wf::parallel {

// Counts per (query run, key run) block, independent of the batch size and head count: one
// computed block is one kernel call covering every batch element and head.
struct BlockAttentionStats {
  std::int64_t blocks_computed = 0;  // (query run, key run) blocks computed (per batch element)
  std::int64_t blocks_skipped = 0;
  std::int64_t unmasked_pairs = 0;   // (query, key) pairs inside the computed blocks that are visible
  BlockAttentionStats& operator+=(const BlockAttentionStats& o) {
    blocks_computed += o.blocks_computed;
    blocks_skipped += o.blocks_skipped;
    unmasked_pairs += o.unmasked_pairs;
    return *this;
  }
  friend bool operator==(const BlockAttentionStats&, const BlockAttentionStats&) = default;
};

// Folds the attention of q [B, nq, h, d] (positions q_runs) over k, v [B, nk, h_kv, d]
// (positions kv_runs) into the running (o [B, nq, h, d], lse [B, h, nq]) with the
// overflow-safe log-sum-exp merge. Start from o = 0, lse = −inf. With packed documents
// (`documents`, global boundaries as AttentionOptions::doc_bounds), the runs in ascending position
// order are one kernel call with each query's key window inside (its own document's keys), skipped
// when no query sees a key; the stats count the (query run, key run) blocks that hold a pair of
// one document as computed, and those pairs only (summed over the batch rows when each row has its
// own boundaries). f32 or f64; or bf16 q, k, v
// (and d_o) with f32 o, lse and gradients: the dot products multiply in bf16 and accumulate in
// f32 (kernels/cpu/attention.h's bf16 kernels, native on CPUs with AVX512_BF16).
BlockAttentionStats block_attention_forward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                            const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                            double scale, Tensor& o, Tensor& lse, const DocumentBounds& documents = {});

// Adds this K/V block's share of the gradients: dq += ∂L/∂q through this block, dk, dv +=
// ∂L/∂k, ∂L/∂v of this block, given the FINAL (merged over all blocks) o and lse, the output
// gradient d_o and optionally the gradient of lse (undefined = zero).
BlockAttentionStats block_attention_backward(const Tensor& q, const std::vector<TokenRun>& q_runs, const Tensor& k,
                                             const Tensor& v, const std::vector<TokenRun>& kv_runs, bool causal,
                                             double scale, const Tensor& o, const Tensor& lse, const Tensor& d_o,
                                             const Tensor& d_lse, Tensor& dq, Tensor& dk, Tensor& dv,
                                             const DocumentBounds& documents = {});

namespace detail {

// Tests and `wallfacer bench attention` only (its communication-only time): while a scope is
// alive, in any thread, block_attention_forward / backward (and Ulysses' local attention, which
// calls the kernels itself) check their arguments and return with zero stats, launching nothing,
// so a strategy call runs only its messages and small merges. Outputs keep what the strategy
// initialised them to (o = 0, lse = −inf, gradients 0), so nothing downstream sees NaN; the
// results are wrong, which is why this is never for training.
class SkipBlockCompute {
 public:
  SkipBlockCompute();
  ~SkipBlockCompute();
  SkipBlockCompute(const SkipBlockCompute&) = delete;
  SkipBlockCompute& operator=(const SkipBlockCompute&) = delete;
  static bool active();
};

}  // namespace detail

}  // namespace wf::parallel
