// Packed documents in attention: the checks, the key windows and the pair counts (document_attention.h).
#include "src/ops/document_attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "wallfacer/core/error.h"

namespace wf::ops {
namespace {

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// Copies rows [src_start, src_start + len) of dim `dim` of src into rows [dst_start, ...) of
// dst, for every batch row (the other dims equal; one device).
void copy_rows(const Tensor& src, std::int64_t src_start, Tensor& dst, std::int64_t dst_start, std::int64_t len,
               std::size_t dim) {
  const Shape& shape = src.shape();
  const std::int64_t outer = product(shape, 0, dim);
  const std::int64_t row = product(shape, dim + 1, shape.size());
  const std::int64_t src_block = shape[dim] * row, dst_block = dst.shape()[dim] * row;
  const ops::Kernels k = ops::kernels_for("attention rows", {src, dst});
  k->copy_blocks(k.stream, dtype_size(src.dtype()), src.raw_data(), src_block, src_start * row, dst.raw_data(),
                 dst_block, dst_start * row, outer, len * row);
}

// The pairs of one boundary list: per document that holds a query and a key, the pairs of the
// call on its sub-ranges.
std::int64_t list_pairs(const kernels::AttentionShape& call, const std::vector<std::int64_t>& bounds) {
  const std::int64_t a = call.q_offset, q_end = a + call.q_len, c = call.kv_offset, kv_end = c + call.kv_len;
  // The first document that can hold a query and a key: the one containing max(a, c).
  const auto it = std::upper_bound(bounds.begin(), bounds.end(), std::max(a, c));
  std::size_t i = it == bounds.begin() ? 0 : static_cast<std::size_t>(it - bounds.begin() - 1);
  std::int64_t pairs = 0;
  for (; i + 1 < bounds.size() && bounds[i] < std::min(q_end, kv_end); ++i) {
    kernels::AttentionShape piece = call;
    const std::int64_t qs = std::max(a, bounds[i]), ks = std::max(c, bounds[i]);
    piece.q_len = std::min(q_end, bounds[i + 1]) - qs;
    piece.kv_len = std::min(kv_end, bounds[i + 1]) - ks;
    piece.q_offset = qs;
    piece.kv_offset = ks;
    if (piece.q_len > 0 && piece.kv_len > 0) pairs += kernels::attention_pairs(piece);
  }
  return pairs;
}

// How many boundary lists a call needs: one when every row shares its list, else one per row.
std::size_t distinct_lists(const DocumentBounds& bounds) {
  const bool shared = std::all_of(bounds.begin(), bounds.end(), [&](const auto& b) { return b == bounds[0]; });
  return shared ? std::min<std::size_t>(bounds.size(), 1) : bounds.size();
}

}  // namespace

Tensor rows_of(const Tensor& t, std::size_t dim, std::int64_t start, std::int64_t len) {
  if (start == 0 && len == t.shape()[dim]) return t;
  Shape shape = t.shape();
  shape[dim] = len;
  Tensor rows = Tensor::empty(shape, t.dtype(), t.device());
  copy_rows(t, start, rows, 0, len, dim);
  return rows;
}

void store_rows(Tensor& t, std::size_t dim, std::int64_t start, const Tensor& rows) {
  if (rows.is_same(t)) return;
  copy_rows(rows, 0, t, start, rows.shape()[dim], dim);
}

void check_document_bounds(const char* what, const DocumentBounds& bounds, std::int64_t batch, std::int64_t seq_len,
                           bool exact) {
  if (bounds.empty()) return;
  WF_CHECK(bounds.size() == 1 || static_cast<std::int64_t>(bounds.size()) == batch,
           "{}: doc_bounds holds {} boundary lists for a batch of {} rows; give one list per batch row or one list "
           "shared by every row",
           what, bounds.size(), batch);
  for (std::size_t r = 0; r < bounds.size(); ++r) {
    const std::vector<std::int64_t>& b = bounds[r];
    const bool sorted = std::adjacent_find(b.begin(), b.end(), std::greater_equal<>()) == b.end();
    const bool ends = !b.empty() && (exact ? b.back() == seq_len : b.back() >= seq_len);
    WF_CHECK(b.size() >= 2 && b.front() == 0 && sorted && ends,
             "{}: doc_bounds[{}] = [{}] must be the cumulative document boundaries 0 = b0 < b1 < ... < bk = {} of "
             "the sequence{}: start at 0, strictly increase (no empty document) and end at the sequence length",
             what, r, fmt::join(b, ", "), seq_len, exact ? "" : " (or later)");
  }
}

std::int64_t document_pairs(const kernels::AttentionShape& call, const DocumentBounds& bounds) {
  std::int64_t pairs = 0;
  const std::size_t lists = distinct_lists(bounds);
  for (std::size_t r = 0; r < lists; ++r) pairs += list_pairs(call, bounds[r]);
  return pairs;
}

KeyWindows::KeyWindows(const std::vector<std::int64_t>& q_positions, const std::vector<std::int64_t>& kv_positions,
                       const DocumentBounds& bounds, bool causal) {
  const auto ascending = [](const std::vector<std::int64_t>& p) {
    return std::adjacent_find(p.begin(), p.end(), std::greater_equal<>()) == p.end();
  };
  WF_CHECK(ascending(q_positions) && ascending(kv_positions),
           "attention key windows: query and key positions must be strictly ascending (a layout's runs in storage "
           "order); split the call where they are not");
  WF_CHECK(!bounds.empty(), "attention key windows: no document boundaries");
  lists_ = static_cast<std::int64_t>(distinct_lists(bounds));
  ranges_.reserve(static_cast<std::size_t>(lists_) * q_positions.size());
  const auto key_row = [&](std::int64_t position) {  // the first key row at or after a position
    return std::lower_bound(kv_positions.begin(), kv_positions.end(), position) - kv_positions.begin();
  };
  for (std::int64_t r = 0; r < lists_; ++r) {
    const std::vector<std::int64_t>& b = bounds[static_cast<std::size_t>(r)];
    for (const std::int64_t p : q_positions) {
      const auto next = std::upper_bound(b.begin(), b.end(), p);  // the end of p's document
      WF_CHECK(next != b.begin() && next != b.end(),
               "attention key windows: query position {} lies outside the documents [0, {})", p, b.back());
      const std::int64_t begin = key_row(*(next - 1)), end = key_row(causal ? std::min(p + 1, *next) : *next);
      ranges_.push_back({begin, end});
      pairs_ += end - begin;
    }
  }
}

kernels::AttentionShape KeyWindows::applied_to(const kernels::AttentionShape& call) const {
  kernels::AttentionShape s = call;
  s.windows = {ranges_.data(), lists_};
  return s;
}

std::vector<std::int64_t> position_range(std::int64_t start, std::int64_t len) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(len));
  std::iota(positions.begin(), positions.end(), start);
  return positions;
}

}  // namespace wf::ops
