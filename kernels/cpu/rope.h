#pragma once
// Rotary position embedding (RoPE), rotate-half convention (GPT-NeoX, Hugging Face LLaMA):
// within each head of width d, channel i pairs with channel i + d/2 (i < d/2) and the pair is
// rotated by angle a = pos · theta^(−2i/d):
//
//   y[i]       = x[i] · cos a − x[i + d/2] · sin a
//   y[i + d/2] = x[i] · sin a + x[i + d/2] · cos a
//
// x and y are row-major [batch, tokens, heads, d]; positions[t] is the global position of
// token t (any i64: under sequence parallelism a rank's tokens are not contiguous). The
// rotation is orthogonal, so its backward is the same rotation by −a: `inverse` selects it.
// Angles are computed in double (pos up to 2^53 stays exact), so f32 loses only the final
// rounding. Rows run in parallel; each output element depends only on its own pair, so the
// result never depends on the thread count. y may alias x (in place).
#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cpu {

using kernels::RopeShape;  // kernels/kernel_args.h
using kernels::check_rope_shape;

template <typename T>
void rope(const RopeShape& s, const T* x, const std::int64_t* positions /*[tokens]*/, bool inverse, T* y);

// ---- reference: cos/sin of every element's angle straight from the formula, in double -------
template <typename T>
void rope_reference(const RopeShape& s, const T* x, const std::int64_t* positions, bool inverse, T* y);

}  // namespace wf::kernels::cpu
