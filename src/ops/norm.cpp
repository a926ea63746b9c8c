// LayerNorm and RMSNorm over the last dim, on their device's norm kernels (kernels/backend.h). The forward
// saves the per-row statistics (mean, rstd) in the compute dtype, so the backward never
// recomputes them and a bf16/f16 input does not round them to 16 bits.
#include "wallfacer/ops/norm.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

// Nullable kernel arguments: an undefined (optional) tensor becomes a null pointer.
template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* data_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// A zeroed [cols] buffer for an accumulated (+=) parameter gradient, or nothing when the
// parameter needs no gradient.
template <class T>
Tensor param_grad_buffer(bool needed, std::int64_t cols, Device device) {
  return needed ? Tensor::zeros({cols}, dtype_v<T>, device) : Tensor();
}

// The checks both norms share: x is a floating tensor with a last dim, each optional
// affine parameter is a vector over that last dim of x's dtype, eps is a usable epsilon.
void check_norm_args(const char* op, const Tensor& x, std::initializer_list<std::pair<const Tensor*, const char*>> params,
                     double eps) {
  ops::check_floating(op, x, "x");
  ops::check_min_dim(op, x, 1, "x");
  const std::int64_t cols = x.size(-1);
  for (const auto& [param, arg] : params) {
    if (!param->defined()) continue;
    WF_CHECK(param->shape() == Shape{cols},
             "{}: {} has shape {}, but x of shape {} is normalised over its last dim of {}; {} must have shape [{}] "
             "(or be undefined for no affine transform)",
             op, arg, shape_str(param->shape()), shape_str(x.shape()), cols, arg, cols);
    WF_CHECK(param->dtype() == x.dtype(), "{}: {} has dtype {} but x has dtype {}; convert one with cast()", op, arg,
             dtype_name(param->dtype()), dtype_name(x.dtype()));
    ops::kernels_for(op, {x, *param});  // on x's device
  }
  WF_CHECK(std::isfinite(eps) && eps >= 0, "{}: eps must be finite and >= 0, got {}", op, eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  static constexpr const char* op = "layer_norm";
  check_norm_args(op, x, {{&weight, "weight"}, {&bias, "bias"}}, eps);
  const DType dtype = x.dtype();
  const std::int64_t rows = ops::rows_of(x.shape()), cols = x.size(-1);
  return autograd::apply_function(
      op, {x, weight, bias},
      [=](Context& ctx, const TensorList& in) {
        const ops::Kernels k = ops::kernels_for(op, {in[0], in[1], in[2]});
        return TensorList{ops::compute_in(op, dtype, in, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor y = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
          Tensor mean = Tensor::empty({rows}, dtype_v<T>, k.device()), rstd = Tensor::empty({rows}, dtype_v<T>, k.device());
          k->layernorm_forward(k.stream, dtype_v<T>, rows, cols, c[0].data<T>(), data_or_null<T>(c[1]),
                               data_or_null<T>(c[2]), eps, y.data<T>(), mean.data<T>(), rstd.data<T>());
          ctx.save_for_backward({in[0], in[1], mean, rstd});
          return y;
        })};
      },
      [=](Context& ctx, const TensorList& grad) {
        const TensorList& s = ctx.saved();  // x, weight, mean, rstd
        const ops::Kernels k = ops::kernels_for(op, {s[0], s[1], grad[0]});
        return ops::compute_in(op, dtype, {s[0], s[1], s[2], s[3], grad[0]}, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor dx = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());  // the kernel always writes dx
          Tensor dweight = param_grad_buffer<T>(ctx.needs_input_grad(1), cols, k.device());
          Tensor dbias = param_grad_buffer<T>(ctx.needs_input_grad(2), cols, k.device());
          k->layernorm_backward(k.stream, dtype_v<T>, rows, cols, c[0].data<T>(), data_or_null<T>(c[1]),
                                c[2].data<T>(), c[3].data<T>(), c[4].data<T>(), dx.data<T>(), data_or_null<T>(dweight),
                                data_or_null<T>(dbias));
          return TensorList{ctx.needs_input_grad(0) ? dx : Tensor(), dweight, dbias};
        });
      })[0];
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  static constexpr const char* op = "rms_norm";
  check_norm_args(op, x, {{&weight, "weight"}}, eps);
  const DType dtype = x.dtype();
  const std::int64_t rows = ops::rows_of(x.shape()), cols = x.size(-1);
  return autograd::apply_function(
      op, {x, weight},
      [=](Context& ctx, const TensorList& in) {
        const ops::Kernels k = ops::kernels_for(op, {in[0], in[1]});
        return TensorList{ops::compute_in(op, dtype, in, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor y = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
          Tensor rstd = Tensor::empty({rows}, dtype_v<T>, k.device());
          k->rmsnorm_forward(k.stream, dtype_v<T>, rows, cols, c[0].data<T>(), data_or_null<T>(c[1]), eps,
                             y.data<T>(), rstd.data<T>());
          ctx.save_for_backward({in[0], in[1], rstd});
          return y;
        })};
      },
      [=](Context& ctx, const TensorList& grad) {
        const TensorList& s = ctx.saved();  // x, weight, rstd
        const ops::Kernels k = ops::kernels_for(op, {s[0], s[1], grad[0]});
        return ops::compute_in(op, dtype, {s[0], s[1], s[2], grad[0]}, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor dx = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
          Tensor dweight = param_grad_buffer<T>(ctx.needs_input_grad(1), cols, k.device());
          k->rmsnorm_backward(k.stream, dtype_v<T>, rows, cols, c[0].data<T>(), data_or_null<T>(c[1]),
                              c[2].data<T>(), c[3].data<T>(), dx.data<T>(), data_or_null<T>(dweight));
          return TensorList{ctx.needs_input_grad(0) ? dx : Tensor(), dweight};
        });
      })[0];
}

}  // namespace wf
