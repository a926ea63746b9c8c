#pragma once
// Differentiable matrix products (GEMM kernels underneath).
#include "wallfacer/core/tensor.h"

namespace wf {

// a [..., M, K] @ b [..., K, N] → [..., M, N]. Batch dims must match, or b may be 2-D (shared
// across the batch, e.g. a weight); the optional transposes apply to the last two dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// x [..., in] · weightᵀ [in, out] + bias [out]: the layout of nn::Linear (weight [out, in]).
// x, weight and bias share a dtype, or — mixed precision (nn/precision.h) — x is bf16 and the
// weight and bias are f32 masters: the product multiplies in bf16 (f32 accumulation), y is bf16,
// and the weight's and bias's gradients come back f32, never rounded to bf16.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias)) (GPT-2's tanh approximation) as one node, the same dtypes and
// results bit for bit where the backend computes the pair as that composition (the CPU); a backend
// may compute the GELU in the product's epilogue (cuBLASLt; kernels/backend.h linear_gelu_forward),
// saving a pass over the activation. Saves x, the weight and the pre-activation for the backward.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// residual + linear(x, weight, bias) (a projection onto the residual stream) as one node. The
// residual has the output's shape (no broadcasting) and x's dtype (bf16 under mixed precision).
// The results are add(residual, linear(x, weight, bias))'s bit for bit where the backend computes
// the pair as that composition (the CPU); a backend may add the residual in the product's
// epilogue (cuBLASLt, C = residual with beta 1; kernels/backend.h linear_add_forward), saving a
// pass over the output. Saves what linear saves; the residual's gradient is the output's.
Tensor linear_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual);

}  // namespace wf
