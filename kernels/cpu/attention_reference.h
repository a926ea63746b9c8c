#pragma once
// Naive attention: the whole score matrix of each (batch, head), in double, by the textbook
// formulas. The oracle for the blocked kernels in attention.h (same layouts, masks, offsets and
// GQA mapping); O(q_len·kv_len) memory, for tests only.
#include <cstdint>

#include "kernels/cpu/attention.h"

namespace wf::kernels::cpu {

// o [batch, q_len, heads, head_dim], lse [batch, heads, q_len]; a row with no visible key gets
// O = 0 and lse = -inf.
template <class T>
void attention_forward_reference(const AttentionShape& shape, const T* q, const T* k, const T* v, double* o,
                                 double* lse);

// Gradients of Σ dO∘O + Σ d_lse∘lse with respect to Q, K, V (overwritten), via P = softmax(S),
// dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − rowsum(P∘dP) + d_lse), dQ = scale·dS·K,
// dK = scale·dSᵀ·Q. d_lse ([batch, heads, q_len]) may be null (zero).
template <class T>
void attention_backward_reference(const AttentionShape& shape, const T* q, const T* k, const T* v, const T* d_o,
                                  double* dq, double* dk, double* dv, const T* d_lse = nullptr);

}  // namespace wf::kernels::cpu
