// Reductions. Sums and means run their device's reduction kernels (kernels/backend.h; the CPU's
// in kernels/cpu/reduce.h), which accumulate in double in a
// fixed order, so results do not depend on the thread count. Their backward broadcasts the
// gradient back over the reduced dims.
#include "wallfacer/ops/reduction.h"

#include <optional>

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

// A differentiable sum of x down to `out_shape`, computed by sum_kernel(kernels, dtype, x, out)
// in the compute dtype. Its backward is that of any sum: the gradient broadcast back over x (seen
// as `grad_shape`, whose dims line up with x's), times `grad_scale` when there is one (means).
template <class SumKernel>
Tensor differentiable_sum(const char* name, const Tensor& x, const Shape& out_shape, const Shape& grad_shape,
                          std::optional<double> grad_scale, SumKernel sum_kernel) {
  const Shape x_shape = x.shape();
  return autograd::apply_function(
      name, {x},
      [=](Context&, const TensorList& in) {
        const ops::Kernels k = ops::kernels_for(name, {in[0]});
        return TensorList{ops::compute_in(name, in[0].dtype(), in, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor out = Tensor::empty(out_shape, dtype_v<T>, k.device());
          sum_kernel(k, dtype_v<T>, c[0].raw_data(), out.raw_data());
          return out;
        })};
      },
      [=](Context&, const TensorList& grad) {
        Tensor g = ops::broadcast_to(name, grad[0].view(grad_shape), x_shape);
        return TensorList{grad_scale ? scale(g, *grad_scale) : g};
      })[0];
}

// Σ (or mean) over `dim`, or over every element when dim is empty (a 0-dim result).
Tensor reduce_sum(const char* name, const Tensor& x, std::optional<std::int64_t> dim, bool keepdim, bool mean) {
  ops::check_floating(name, x, "the input");
  // The reduction as [outer, extent, inner], and the result's shape with and without the
  // reduced dim (the backward broadcasts from the keepdim shape).
  ops::DimSplit s;
  Shape out_shape, kept_shape;
  if (dim) {
    WF_CHECK(x.dim() > 0, "{}: cannot reduce dim {} of a 0-dim tensor", name, *dim);
    s = ops::split_at_dim(x.shape(), *dim);
    out_shape = ops::reduced_shape(x.shape(), s.dim, keepdim);
    kept_shape = ops::reduced_shape(x.shape(), s.dim, true);
  } else {
    s.extent = x.numel();
  }
  const std::optional<double> grad_scale =
      mean ? std::optional<double>(1.0 / static_cast<double>(s.extent)) : std::nullopt;
  return differentiable_sum(name, x, out_shape, kept_shape, grad_scale,
                            [s, mean](const ops::Kernels& k, DType dt, const void* in, void* out) {
                              if (mean) {
                                k->mean_dim(k.stream, dt, s.outer, s.extent, s.inner, in, out);
                              } else {
                                k->sum_dim(k.stream, dt, s.outer, s.extent, s.inner, in, out);
                              }
                            });
}

// Values and (first) arg-max indices of x along dim, in x's dtype and i64.
TensorList max_with_indices(const char* name, const Tensor& x, const ops::DimSplit& s, const Shape& out_shape) {
  const ops::Kernels k = ops::kernels_for(name, {x});
  return ops::compute_in(name, x.dtype(), {x}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor values = Tensor::empty(out_shape, dtype_v<T>, k.device());
    Tensor indices = Tensor::empty(out_shape, DType::i64, k.device());
    k->max_dim(k.stream, dtype_v<T>, s.outer, s.extent, s.inner, c[0].data<T>(), values.data<T>(),
               indices.data<std::int64_t>());
    return TensorList{values, indices};
  });
}

ops::DimSplit checked_max_dim(const char* name, const Tensor& x, std::int64_t dim) {
  ops::check_floating(name, x, "the input");
  WF_CHECK(x.dim() > 0, "{}: needs at least one dim, got a 0-dim tensor", name);
  const ops::DimSplit s = ops::split_at_dim(x.shape(), dim);
  WF_CHECK(s.extent > 0, "{}: dim {} of shape {} is empty; the maximum of nothing is undefined", name, dim,
           shape_str(x.shape()));
  return s;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_sum("sum", x, std::nullopt, false, false); }
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) { return reduce_sum("sum", x, dim, keepdim, false); }
Tensor mean(const Tensor& x) { return reduce_sum("mean", x, std::nullopt, false, true); }
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) { return reduce_sum("mean", x, dim, keepdim, true); }

Tensor max(const Tensor& x, std::int64_t dim, bool keepdim) {
  const ops::DimSplit s = checked_max_dim("max", x, dim);
  const Shape out_shape = ops::reduced_shape(x.shape(), s.dim, keepdim);
  const Shape x_shape = x.shape();
  return autograd::apply_function(
      "max", {x},
      [=](Context& ctx, const TensorList& in) {
        TensorList both = max_with_indices("max", in[0], s, out_shape);
        ctx.save_for_backward({both[1]});
        return TensorList{both[0]};
      },
      [=](Context& ctx, const TensorList& grad) {
        // Each output's gradient lands on the element that was the maximum; the rest get zero.
        const Tensor& indices = ctx.saved()[0];
        const ops::Kernels k = ops::kernels_for("max", {grad[0], indices});
        return TensorList{ops::compute_in("max", grad[0].dtype(), grad, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor dx = Tensor::empty(x_shape, dtype_v<T>, k.device());
          k->max_dim_backward(k.stream, dtype_v<T>, s.outer, s.extent, s.inner, c[0].data<T>(),
                              indices.data<std::int64_t>(), dx.data<T>());
          return dx;
        })};
      })[0];
}

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  const ops::DimSplit s = checked_max_dim("argmax", x, dim);
  return max_with_indices("argmax", x, s, ops::reduced_shape(x.shape(), s.dim, keepdim))[1];
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  constexpr const char* name = "sum_to_shape";
  ops::check_floating(name, x, "the input");
  if (x.shape() == shape) return x;
  const std::size_t nd = x.shape().size();
  WF_CHECK(shape.size() <= nd, "{}: cannot sum shape {} down to shape {}, which has more dims", name,
           shape_str(x.shape()), shape_str(shape));
  const Shape target = ops::right_aligned(shape, nd);
  for (std::size_t d = 0; d < nd; ++d) {
    WF_CHECK(target[d] == x.shape()[d] || target[d] == 1,
             "{}: cannot sum shape {} down to shape {}: shape {} does not broadcast to it (dim {}: {} vs {})", name,
             shape_str(x.shape()), shape_str(shape), shape_str(shape), d, target[d], x.shape()[d]);
  }
  return differentiable_sum(name, x, shape, shape, std::nullopt,
                            [x_shape = x.shape(), target](const ops::Kernels& k, DType dt, const void* in, void* out) {
                              k->reduce_broadcast(k.stream, dt, in, x_shape, out, target);
                            });
}

}  // namespace wf
