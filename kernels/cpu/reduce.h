#pragma once
// Reductions on contiguous row-major arrays. A reduction over one dim views the tensor as
// [outer, dim, inner] (outer = product of the extents before the dim, inner = after it).
//
// All sums accumulate in double and visit elements in a fixed order that depends only on the
// shape (never on the thread count or scheduling), so results are bitwise reproducible run to
// run and across OMP_NUM_THREADS.
#include <cstdint>

namespace wf::kernels::cpu {

// out[o, i] = Σ_d x[o, d, i]. out has outer·inner elements. dim == 0 gives zeros.
template <class T>
void sum_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out);

// out[o, i] = (Σ_d x[o, d, i]) / dim. dim == 0 gives NaN (the mean of nothing), like PyTorch.
template <class T>
void mean_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out);

// out_values[o, i] = max_d x[o, d, i] and out_argmax[o, i] its d (the first one on ties).
// NaN propagates: a NaN is the maximum and its index is reported. out_argmax may be null.
// dim must be > 0 unless the output is empty.
template <class T>
void max_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out_values,
             std::int64_t* out_argmax);

// max_dim's backward: dx[o, argmax[o, i], i] = grad[o, i], every other element of dx 0 (dx is
// overwritten).
template <class T>
void max_dim_backward(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* grad,
                      const std::int64_t* argmax, T* dx);
// Σ x[i] over all n elements, in double.
template <class T>
double sum_all(std::int64_t n, const T* x);

// Σ x[i]·y[i] in double (sum of squares with y == x).
template <class T>
double sum_of_products(std::int64_t n, const T* x, const T* y);

// The backward of broadcasting: sums a gradient of out_shape down to in_shape. Both shapes
// have `ndim` dims, right-aligned by the caller (pad in_shape with leading 1s); every in_shape
// extent is 1 (summed over) or equal to out_shape's. result has numel(in_shape) elements.
template <class T>
void reduce_broadcast(const T* grad, const std::int64_t* out_shape, T* result,
                      const std::int64_t* in_shape, int ndim);

}  // namespace wf::kernels::cpu
