#pragma once
// Differentiable normalisations over the last dim (LayerNorm and RMSNorm kernels underneath,
// which save mean/rstd for the backward).
#include "wallfacer/core/tensor.h"

namespace wf {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace wf
