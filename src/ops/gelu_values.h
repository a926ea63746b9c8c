#pragma once
// GELU's forward and backward kernels as values, without autograd nodes (src/ops/activation.cpp):
// the pieces that gelu() and linear_gelu() (src/ops/linalg.cpp) share, so the fused op's GELU is
// the very computation of the unfused one.
#include "wallfacer/core/tensor.h"

namespace wf::ops {

// gelu(x) (the tanh approximation) in x's compute dtype, on x's device; x's shape and dtype.
Tensor gelu_values(const Tensor& x);
// The gradient of gelu at x for the output gradient `grad` (x's shape and dtype).
Tensor gelu_backward_values(const Tensor& x, const Tensor& grad);

}  // namespace wf::ops
