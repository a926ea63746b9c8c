#pragma once
// The composition split_qkv_rope replaced in SelfAttention::project: reshape the projection to
// [B, T, groups, G + 2, head_dim], narrow + reshape out q, k, v (a copy each), then rope() on q
// and k. Kept as the reference the fused op is tested (tests/ops/test_qkv_rope.cpp) and measured
// (`wallfacer bench kernels --qkv-rope`) against.
#include <cstdint>

#include "wallfacer/ops/rope.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::ops {

inline QkvHeads composed_split_qkv_rope(const Tensor& projected, std::int64_t groups, std::int64_t group_size,
                                        std::int64_t head_dim, const Tensor& positions, double theta = 10000.0) {
  const std::int64_t batch = projected.size(0), tokens = projected.size(1), G = group_size;
  const Tensor qkv = reshape(projected, {batch, tokens, groups, G + 2, head_dim});
  QkvHeads h{reshape(narrow(qkv, 3, 0, G), {batch, tokens, groups * G, head_dim}),
             reshape(narrow(qkv, 3, G, 1), {batch, tokens, groups, head_dim}),
             reshape(narrow(qkv, 3, G + 1, 1), {batch, tokens, groups, head_dim})};
  if (positions.defined()) {
    h.q = rope(h.q, positions, theta);
    h.k = rope(h.k, positions, theta);
  }
  return h;
}

}  // namespace wf::ops
