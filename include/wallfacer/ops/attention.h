#pragma once
// Differentiable blocked (flash-style) attention on one device. The distributed strategies
// (ring, Ulysses, WallFacer) call the same kernels block by block.
#include <cstdint>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf {

// Packed documents: per batch row, the cumulative boundaries 0 = b0 < b1 < ... < bk = N of the
// documents in the row's GLOBAL sequence of N tokens (document i holds positions [b_i, b_i+1)),
// as data::Batch::doc_bounds gives them. One list per batch row, or one list shared by every row.
using DocumentBounds = std::vector<std::vector<std::int64_t>>;

struct AttentionOptions {
  bool causal = false;
  // Global position of the first query / key of these blocks in the full sequence, so that a
  // block of a longer sequence is masked correctly (causal: key position <= query position).
  std::int64_t q_offset = 0;
  std::int64_t kv_offset = 0;
  double scale = 0;  // 0 → 1/sqrt(head_dim)
  // Empty: one document per row (plain attention). Else a query attends only to keys of its own
  // document (causal inside it when `causal`): the calls are split per document into kernel
  // calls on the sub-ranges, pairs across documents are never computed
  // (docs/sequence-parallelism.md, "Packed documents"). N, the end of every list, is the end of
  // the covered positions, max(q_offset + n_q, kv_offset + n_k), for attention(); the
  // sequence-parallel strategies' seq_len for theirs.
  DocumentBounds doc_bounds = {};
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
