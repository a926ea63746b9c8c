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

}  // namespace wf
