#pragma once
// The fused QKV projection's output split into contiguous q, k, v heads with RoPE on q and k, in
// one pass (SelfAttention::project's split; before it, narrow + reshape copied each of q, k, v and
// rope read and wrote q and k again).
//
//   projected [batch, tokens, groups, G + 2, head_dim]   (G = group_size query heads per kv head)
//   q [batch, tokens, groups·G, head_dim] = projected[..., 0:G, :] rotated
//   k [batch, tokens, groups, head_dim]   = projected[..., G, :] rotated
//   v [batch, tokens, groups, head_dim]   = projected[..., G + 1, :]
//
// The rotation is rope's (kernels/cpu/rope.h) with the same table and arithmetic
// (kernels/cpu/rope_table.h), so q and k are bit for bit rope() of the split heads. With
// shape.rotate false it is the plain split. The backward is the transpose: d_projected gets dq and
// dk rotated by the opposite angle and dv copied; a null dq, dk or dv (no gradient) writes zeros
// there. Rows (batch · tokens) run in parallel; nothing depends on the thread count.
#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cpu {

using kernels::QkvRopeShape;  // kernels/kernel_args.h
using kernels::check_qkv_rope_shape;

template <typename T>
void qkv_rope_forward(const QkvRopeShape& s, const T* projected, const std::int64_t* positions /*[tokens]*/, T* q,
                      T* k, T* v);
template <typename T>
void qkv_rope_backward(const QkvRopeShape& s, const T* dq, const T* dk, const T* dv /*each nullable*/,
                       const std::int64_t* positions, T* d_projected);

// ---- references: index arithmetic element by element, angles straight from the formula ----
template <typename T>
void qkv_rope_forward_reference(const QkvRopeShape& s, const T* projected, const std::int64_t* positions, T* q, T* k,
                                T* v);
template <typename T>
void qkv_rope_backward_reference(const QkvRopeShape& s, const T* dq, const T* dk, const T* dv,
                                 const std::int64_t* positions, T* d_projected);

}  // namespace wf::kernels::cpu
