#pragma once
// Packed documents in attention (AttentionOptions::doc_bounds), internal to src/ops and
// src/parallel. No kernel knows about documents: a call covering query positions [a, a + n) and
// key positions [c, c + m) is split into one kernel call per document that intersects both
// ranges (a "piece", on the sub-ranges, causal inside the document), per batch row when the rows'
// boundaries differ. A query belongs to one document, so the pieces of a call touch disjoint
// query rows and disjoint key rows: each piece's (o, lse) is merged into the running result
// with attention_merge, and its gradients are accumulated into its own rows. Pairs in different
// documents are never computed; a call with no piece launches nothing (lse stays −inf, o 0).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/ops/common.h"
#include "wallfacer/ops/attention.h"

namespace wf::ops {

// Rows [start, start + len) of dim `dim` of t [B, ...] (dim >= 1), of every batch row
// (batch_row < 0) or of one (then dim 0 has size 1), as a contiguous tensor: t itself when that
// is all of it, else a copy (same device, no host touch).
Tensor rows_of(const Tensor& t, std::size_t dim, std::int64_t start, std::int64_t len, std::int64_t batch_row = -1);
// Writes rows obtained from rows_of back (nothing to do when they were t itself).
void store_rows(Tensor& t, std::size_t dim, std::int64_t start, const Tensor& rows, std::int64_t batch_row = -1);

// wf::Error prefixed by `what` unless `bounds` is one list per batch row (or one shared list),
// each starting at 0, strictly increasing and ending at seq_len (exact) or at seq_len or later
// (exact = false: a caller that sees only some positions).
void check_document_bounds(const char* what, const DocumentBounds& bounds, std::int64_t batch, std::int64_t seq_len,
                           bool exact = true);

struct DocumentPiece {
  std::int64_t batch_row = -1;  // −1: every batch row (they share their boundaries)
  // The kernel call: batch 1 or B, the sub-ranges' lengths, causal only where the mask cuts
  // (then q_offset, kv_offset are the sub-ranges' global starts), the call's heads and scale.
  kernels::AttentionShape shape;
  std::int64_t q_row = 0, kv_row = 0;  // first query / key row of the sub-ranges in the call's buffers
  std::int64_t pairs = 0;              // visible (query, key) pairs per batch row and head
};

// The pieces of a call (`call`: the whole buffers' shape, q_offset and kv_offset the global
// positions of their first rows, causal the mask inside documents). Bounds must be checked.
std::vector<DocumentPiece> document_pieces(const kernels::AttentionShape& call, const DocumentBounds& bounds);

// Visible pairs of the pieces, summed over the batch rows that have their own boundaries
// (counted once for shared ones, like a block's pairs).
std::int64_t document_pairs(const std::vector<DocumentPiece>& pieces);

// Merges every piece's attention into the running o [B, n, h, d], lse [B, h, n] (contiguous;
// start a fresh result from o = 0, lse = −inf). q, k, v in the dtype the kernels multiply in
// (`operands`), o and lse in the accumulator dtype.
void document_attention_forward(const Kernels& kern, DType operands, const std::vector<DocumentPiece>& pieces,
                                const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, Tensor& lse);
// Adds every piece's gradients to dq, dk, dv (start from zeros), given the final o, lse, the
// output gradient d_o (operand dtype) and optionally d_lse (undefined = zero).
void document_attention_backward(const Kernels& kern, DType operands, const std::vector<DocumentPiece>& pieces,
                                 const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                 const Tensor& lse, const Tensor& d_o, const Tensor& d_lse, Tensor& dq, Tensor& dk,
                                 Tensor& dv);

}  // namespace wf::ops
