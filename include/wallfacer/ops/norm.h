#pragma once
// Differentiable normalisations over the last dim (LayerNorm and RMSNorm kernels underneath,
// which save mean/rstd for the backward).
#include "wallfacer/core/tensor.h"

namespace wf {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// A pre-norm block's residual add fused in front of its norm: sum = x + branch (same shape, no
// broadcasting) and y = norm(sum), one pass over the activations and one autograd node. Bitwise
// add(x, branch) followed by layer_norm / rms_norm, outputs and gradients (x and branch get the
// same gradient: the norm's plus what sum receives from its other uses).
struct AddNorm {
  Tensor sum;
  Tensor y;
};
AddNorm add_layer_norm(const Tensor& x, const Tensor& branch, const Tensor& weight, const Tensor& bias,
                       double eps = 1e-5);
AddNorm add_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& weight, double eps = 1e-6);

}  // namespace wf
