#pragma once
// Rotary position embedding (RoPE), rotate-half convention (GPT-NeoX, Hugging Face LLaMA):
// in each head of width d, channels i and i + d/2 are rotated together by
// pos · theta^(−2i/d). kernels/cpu/rope.h has the formula.
#include "wallfacer/core/tensor.h"

namespace wf {

// x [B, T, heads, d] (d even) rotated by positions [T] (i64 or i32): the global position of
// each token, which need not be contiguous (sequence-parallel layouts such as zigzag); or by
// positions [B, T], each row's own (packed documents: each token's position inside its document).
// Differentiable in x; the backward is the rotation by the opposite angle.
Tensor rope(const Tensor& x, const Tensor& positions, double theta = 10000.0);

// The attention heads of a fused QKV projection.
struct QkvHeads {
  Tensor q;  // [B, T, groups · group_size, head_dim]
  Tensor k;  // [B, T, groups, head_dim]
  Tensor v;  // [B, T, groups, head_dim]
};

// projected [B, T, groups · (group_size + 2) · head_dim], per kv group its group_size query heads,
// its key head and its value head (SelfAttention's layout), split into contiguous q, k, v with q
// and k rotated as rope(·, positions, theta) rotates them; undefined positions: the plain split.
// One pass over the projection each way, where narrow + reshape + rope made several; bit for bit
// that composition (values and gradients). Differentiable in projected.
QkvHeads split_qkv_rope(const Tensor& projected, std::int64_t groups, std::int64_t group_size, std::int64_t head_dim,
                        const Tensor& positions, double theta = 10000.0);

}  // namespace wf
