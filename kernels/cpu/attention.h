#pragma once
// Blocked (FlashAttention-2 style) scaled dot-product attention on the CPU, forward and
// backward, with causal masks at global positions and grouped-query heads.
//
// Layouts (row-major, no padding):
//   Q, O, dQ, dO : [batch, q_len,  heads,    head_dim]
//   K, V, dK, dV : [batch, kv_len, kv_heads, head_dim]
//   lse          : [batch, heads, q_len]      (natural log of the softmax denominator)
// GQA: heads % kv_heads == 0 and query head h reads kv head h / (heads / kv_heads). K and V are
// never copied per query head.
//
// Semantics: s = scale·q·k over the unmasked keys; lse = log Σ exp(s); O = softmax(s)·V. With
// `causal`, key position kv_offset + j is visible to query position q_offset + i iff
// kv_offset + j <= q_offset + i. A query row that sees no key at all (kv_len == 0, or a causal
// block entirely in its future) gets O = 0, lse = -inf and zero gradients, never NaN.
//
// Only tiles of the score matrix are ever materialised: scratch is O(threads · tile²), plus in
// the backward a few dQ-sized partial buffers when batch·kv_heads does not spread over the
// threads. Results are bitwise reproducible for a fixed thread count on a given machine.
// Threading: OpenMP over tiles (wf::num_threads()); OpenBLAS is kept at one thread.
// Design notes and measured speed: docs/kernels-attention.md.
#include <cstdint>

#include "kernels/kernel_args.h"

#include "wallfacer/core/dtype.h"

namespace wf::kernels::cpu {

// The shape descriptor and its checks are the backends' shared ones (kernels/kernel_args.h).
using kernels::AttentionShape;
using kernels::attention_scale;
using kernels::check_attention_shape;

// Writes O and lse (both overwritten).
template <class T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* o, T* lse);

// Gradients of the forward above, given its O and lse and the output gradient dO. P is
// recomputed tile by tile from Q, K and lse.
//
// accumulate == false: dq, dk, dv are overwritten.
// accumulate == true : the gradients are ADDED to what dq, dk, dv hold, so a ring caller can
//   sum the contributions of successive K/V blocks (or of several rings) into one buffer.
//
// d_lse (optional, [batch, heads, q_len]): the gradient with respect to the lse output, for
// callers that use lse downstream (∂lse/∂s = P, so it adds P·d_lse to dS). Null means zero.
//
// Ring / blockwise use: pass the FINAL (merged over all K/V blocks) O and lse together with one
// K/V block and its kv_offset; the result is exactly that block's share of dQ and the block's
// full dK, dV for these queries (P = exp(s - lse) is then the true global probability, and
// D = rowsum(dO∘O) is the global one).
template <class T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v, const T* o, const T* lse,
                        const T* d_o, T* dq, T* dk, T* dv, bool accumulate = false, const T* d_lse = nullptr);

// The same with bf16 Q, K, V (and dO): every dot product — Q·Kᵀ, P·V, and in the backward
// dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K — multiplies in bf16 and accumulates in f32 (gemm_bf16: native on
// CPUs with AVX512_BF16, where the op layer calls these; P and dS are rounded to bf16 before
// their products, as FlashAttention does on GPUs). The softmax, lse, D = rowsum(dO∘O), O and
// every gradient stay f32. Tested against the f32 kernel on the widened inputs.
void attention_forward_bf16(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v, float* o,
                            float* lse);
void attention_backward_bf16(const AttentionShape& shape, const bf16* q, const bf16* k, const bf16* v, const float* o,
                             const float* lse, const bf16* d_o, float* dq, float* dk, float* dv,
                             bool accumulate = false, const float* d_lse = nullptr);

// Merges a partial result (o_i, lse_i) — attention of the same queries over another set of
// keys — into the running (o, lse), in place: lse ← log(e^lse + e^lse_i), o ← the matching
// weighted mean. Overflow-safe for any lse gap; a -inf partial leaves the running row as it is,
// and two -inf rows stay O = 0 / lse = -inf, with no NaN. Start from O = 0, lse = -inf to merge
// any number of blocks. Layouts as above: o [batch, q_len, heads, head_dim], lse [batch, heads,
// q_len].
template <class T>
void attention_merge(std::int64_t batch, std::int64_t q_len, std::int64_t heads, std::int64_t head_dim, T* o, T* lse,
                     const T* o_i, const T* lse_i);

}  // namespace wf::kernels::cpu
