#pragma once
// Packed documents in attention (AttentionOptions::doc_bounds), internal to src/ops and
// src/parallel. The kernels take each query row's key window inside a call (kernels/kernel_args.h,
// AttentionShape::windows): a query sees the keys of its own document only, causal inside it.
// What this file adds around them: the checks of the user's lists, the windows built from them
// (KeyWindows), and the arithmetic of which (query, key) pairs a call holds, per document: the
// work counters, the skipped blocks and the kept ring steps count them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/ops/common.h"
#include "wallfacer/ops/attention.h"

namespace wf::ops {

// Rows [start, start + len) of dim `dim` of t [B, ...] (dim >= 1), of every batch row, as a
// contiguous tensor: t itself when that is all of it, else a copy (same device, no host touch).
// Block attention hands the kernels one run of a strided layout this way.
Tensor rows_of(const Tensor& t, std::size_t dim, std::int64_t start, std::int64_t len);
// Writes rows obtained from rows_of back (nothing to do when they were t itself).
void store_rows(Tensor& t, std::size_t dim, std::int64_t start, const Tensor& rows);

// wf::Error prefixed by `what` unless `bounds` is one list per batch row (or one shared list),
// each starting at 0, strictly increasing and ending at seq_len (exact) or at seq_len or later
// (exact = false: a caller that sees only some positions).
void check_document_bounds(const char* what, const DocumentBounds& bounds, std::int64_t batch, std::int64_t seq_len,
                           bool exact = true);

// The visible (query, key) pairs of a call (`call`: q_offset and kv_offset the global positions
// of its first rows, causal the mask inside documents) per head, summed over the batch rows that
// have their own boundaries (counted once for shared ones, like a block's pairs): per document
// that meets both ranges, in O(documents it meets). Bounds must be checked. The work counters,
// the skipped blocks and the kept ring steps count these.
std::int64_t document_pairs(const kernels::AttentionShape& call, const DocumentBounds& bounds);

// The key windows (kernels::AttentionWindows) of a call whose query rows sit at global positions
// q_positions and key rows at kv_positions, both ascending (a contiguous range, or the runs of a
// sequence-parallel layout in storage order): query row i sees the key rows of its own document,
// and with `causal` only those at or before it. One list per batch row, or one for all when the
// rows share their boundaries. The kernels then run a packed call as one call (varlen).
class KeyWindows {
 public:
  KeyWindows(const std::vector<std::int64_t>& q_positions, const std::vector<std::int64_t>& kv_positions,
             const DocumentBounds& bounds, bool causal);
  // `call` (whose q_len and kv_len are the positions' counts) with these windows; they stay
  // valid while this object lives.
  kernels::AttentionShape applied_to(const kernels::AttentionShape& call) const;
  // The visible pairs: the windows' lengths over the lists (a shared list once).
  std::int64_t pairs() const { return pairs_; }

 private:
  std::vector<kernels::KeyRange> ranges_;
  std::int64_t lists_ = 1, pairs_ = 0;
};

// Positions [start, start + len).
std::vector<std::int64_t> position_range(std::int64_t start, std::int64_t len);

}  // namespace wf::ops
