#pragma once
// Differentiable elementwise arithmetic with NumPy broadcasting. Gradients of a broadcast
// operand are summed back to its shape. f32/f64 compute natively; bf16/f16 compute in f32 and
// round the result to the input dtype. Operands must share dtype and device.
#include "wallfacer/core/tensor.h"

namespace wf {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor scale(const Tensor& x, double alpha);       // alpha·x
Tensor add_scalar(const Tensor& x, double value);  // x + value
// Fused transformer residual: x + bias (broadcast over the last dim) + residual.
Tensor bias_residual_add(const Tensor& x, const Tensor& bias, const Tensor& residual);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator*(const Tensor& x, double alpha) { return scale(x, alpha); }
inline Tensor operator*(double alpha, const Tensor& x) { return scale(x, alpha); }

// The broadcast shape of two shapes; wf::Error naming both when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace wf
