// Shape manipulation. Views (reshape, dim-0 narrow) share storage; the rest copy with the raw
// helpers in src/ops/common.h, which move bits and so work for every dtype. Each backward is
// the inverse rearrangement of the gradient.
#include "wallfacer/ops/shape_ops.h"

#include <numeric>

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

// The gradient of a narrow: zeros with g written into [start, start + g.size(dim)) of dim.
Tensor scatter_into_zeros(const Tensor& g, const Shape& shape, std::int64_t dim, std::int64_t start) {
  Tensor dx = Tensor::zeros(shape, g.dtype(), g.device());
  ops::copy_into_range(dx, dim, start, g);
  return dx;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  ops::check_defined("reshape", x, "the input");
  const Shape in_shape = x.shape();
  const Shape out_shape = x.view(shape).shape();  // resolves -1 and reports a numel mismatch
  return autograd::apply_function(
      "reshape", {x}, [=](Context&, const TensorList& in) { return TensorList{in[0].view(out_shape)}; },
      [=](Context&, const TensorList& grad) { return TensorList{grad[0].view(in_shape)}; })[0];
}

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  ops::check_defined("flatten", x, "the input");
  if (x.dim() == 0) return reshape(x, {1});
  const std::int64_t s = normalize_dim(start_dim, x.dim()), e = normalize_dim(end_dim, x.dim());
  WF_CHECK(s <= e, "flatten: start_dim {} comes after end_dim {} for shape {}", start_dim, end_dim, shape_str(x.shape()));
  Shape out(x.shape().begin(), x.shape().begin() + s);
  out.push_back(std::accumulate(x.shape().begin() + s, x.shape().begin() + e + 1, std::int64_t{1},
                                std::multiplies<std::int64_t>()));
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  ops::check_defined("permute", x, "the input");
  const std::vector<std::int64_t> order = ops::checked_permutation("permute", dims, x.shape());
  std::vector<std::int64_t> inverse(order.size());
  for (std::size_t d = 0; d < order.size(); ++d) inverse[order[d]] = static_cast<std::int64_t>(d);
  return autograd::apply_function(
      "permute", {x}, [=](Context&, const TensorList& in) { return TensorList{ops::permute_copy(in[0], order)}; },
      [=](Context&, const TensorList& grad) { return TensorList{ops::permute_copy(grad[0], inverse)}; })[0];
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  ops::check_defined("transpose", x, "the input");
  const std::int64_t d0 = normalize_dim(dim0, x.dim()), d1 = normalize_dim(dim1, x.dim());
  std::vector<std::int64_t> order(x.dim());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::swap(order[d0], order[d1]);
  return permute(x, order);
}

Tensor narrow(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  ops::check_defined("narrow", x, "the input");
  WF_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const ops::DimSplit s = ops::split_at_dim(x.shape(), dim);
  WF_CHECK(start >= 0 && length >= 0 && start + length <= s.extent,
           "narrow: range [{}, {}) is out of bounds for dim {} (extent {}) of shape {}", start, start + length, dim,
           s.extent, shape_str(x.shape()));
  const Shape x_shape = x.shape();
  const std::int64_t d = s.dim;
  return autograd::apply_function(
      "narrow", {x},
      [=](Context&, const TensorList& in) {
        // Rows of dim 0 are contiguous: a view. Any other dim interleaves, so it is copied.
        return TensorList{d == 0 ? in[0].slice0(start, start + length) : ops::narrow_copy(in[0], d, start, length)};
      },
      [=](Context&, const TensorList& grad) { return TensorList{scatter_into_zeros(grad[0], x_shape, d, start)}; })[0];
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  WF_CHECK(!tensors.empty(), "cat: needs at least one tensor");
  const Tensor& first = tensors[0];
  ops::check_defined("cat", first, "tensor 0");
  WF_CHECK(first.dim() > 0, "cat: cannot concatenate 0-dim tensors; reshape them to [1] first");
  const std::int64_t d = normalize_dim(dim, first.dim());
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  std::vector<std::int64_t> offsets, lengths;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::check_same_dtype_device("cat", first, t);
    Shape expected = first.shape();
    expected[d] = t.dim() == first.dim() ? t.shape()[d] : 0;
    WF_CHECK(t.shape() == expected, "cat: tensor {} has shape {} but tensor 0 has shape {}; all extents except dim {} "
             "must match", i, shape_str(t.shape()), shape_str(first.shape()), d);
    offsets.push_back(out_shape[d]);
    lengths.push_back(t.shape()[d]);
    out_shape[d] += t.shape()[d];
  }
  return autograd::apply_function(
      "cat", tensors,
      [=](Context&, const TensorList& in) {
        Tensor out = Tensor::empty(out_shape, in[0].dtype(), in[0].device());
        for (std::size_t i = 0; i < in.size(); ++i) ops::copy_into_range(out, d, offsets[i], in[i]);
        return TensorList{out};
      },
      [=](Context& ctx, const TensorList& grad) {
        TensorList grads(offsets.size());
        for (std::size_t i = 0; i < grads.size(); ++i) {
          if (ctx.needs_input_grad(i)) grads[i] = ops::narrow_copy(grad[0], d, offsets[i], lengths[i]);
        }
        return grads;
      })[0];
}

std::vector<Tensor> split(const Tensor& x, std::int64_t size, std::int64_t dim) {
  ops::check_defined("split", x, "the input");
  WF_CHECK(size > 0, "split: chunk size must be positive, got {}", size);
  WF_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const std::int64_t extent = x.size(dim);
  // Like torch.split: the last chunk is shorter when size does not divide the extent.
  std::vector<Tensor> chunks;
  for (std::int64_t start = 0; start < extent || (extent == 0 && chunks.empty()); start += size) {
    chunks.push_back(narrow(x, dim, start, std::min(size, extent - start)));
  }
  return chunks;
}

Tensor cast(const Tensor& x, DType dtype) {
  ops::check_defined("cast", x, "the input");
  if (x.dtype() == dtype) return x;
  const DType in_dtype = x.dtype();
  return autograd::apply_function(
      "cast", {x}, [=](Context&, const TensorList& in) { return TensorList{in[0].to(dtype)}; },
      [=](Context&, const TensorList& grad) { return TensorList{grad[0].to(in_dtype)}; })[0];
}

}  // namespace wf
