#pragma once
// Differentiable reductions. Deterministic: a fixed summation order, whatever the threads.
#include "wallfacer/core/tensor.h"

namespace wf {

Tensor sum(const Tensor& x);  // all elements → 0-dim tensor
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Max over a dim; the gradient flows to the (first) arg-max element.
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);  // i64, not differentiable
// Sums a broadcast gradient back to `shape` (the transpose of broadcasting).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace wf
