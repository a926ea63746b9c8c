#pragma once
// Differentiable shape manipulation. reshape and dim-0 narrowing are views (no copy); permute,
// transpose, narrow on other dims and cat materialise a new tensor (storage is always
// contiguous row-major).
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf {

Tensor reshape(const Tensor& x, const Shape& shape);  // one extent may be -1
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length);
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
std::vector<Tensor> split(const Tensor& x, std::int64_t size, std::int64_t dim);  // equal chunks of `size`
Tensor cast(const Tensor& x, DType dtype);  // differentiable dtype conversion

}  // namespace wf
