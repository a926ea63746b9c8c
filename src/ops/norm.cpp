// LayerNorm and RMSNorm over the last dim, on their device's norm kernels (kernels/backend.h). The forward
// saves the per-row statistics (mean, rstd) in the compute dtype, so the backward never
// recomputes them and a bf16/f16 input does not round them to 16 bits.
//
// add_layer_norm / add_rms_norm put a pre-norm block's residual add in front: sum = x + branch and
// norm(sum) as one node on one fused backend entry (one pass over the activations, forward and
// backward), bitwise add() followed by the norm, gradients included. All four are one node builder.
#include "wallfacer/ops/norm.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "src/ops/common.h"
#include "wallfacer/ops/arithmetic.h"
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


enum class NormKind { layer, rms };

// One norm call: which norm, and whether the residual add is fused in front. Inputs are
// {x, [branch,] weight, [bias]} (bias for LayerNorm only), outputs {[sum,] y}.
struct NormCall {
  const char* op;
  NormKind kind;
  bool fused;
  double eps;
  DType dtype;
  std::int64_t rows, cols;

  std::size_t weight_index() const { return fused ? 2 : 1; }
  Tensor bias_of(const TensorList& in) const { return kind == NormKind::layer ? in[weight_index() + 1] : Tensor(); }
  // The fused kernels run on the compute dtype. 16-bit storage rounds the sum (and the gradient
  // the norm hands it) to 16 bits between the add and the norm, so there the op runs the add op and
  // the norm's own kernels to keep the composition's bits.
  bool fused_kernel() const { return fused && ops::compute_dtype(op, dtype) == dtype; }
};

// Forward: y (and sum) in x's dtype; saves {x or sum, weight, mean (LayerNorm), rstd}.
TensorList norm_forward(const NormCall& n, Context& ctx, const TensorList& in) {
  const Tensor& weight = in[n.weight_index()];
  const Tensor bias = n.bias_of(in);
  const Tensor rounded_sum = n.fused && !n.fused_kernel() ? add(in[0], in[1]) : Tensor();
  const Tensor& x = rounded_sum.defined() ? rounded_sum : in[0];
  const Tensor branch = n.fused_kernel() ? in[1] : Tensor();
  const ops::Kernels k = ops::kernels_for(n.op, {in[0], weight, bias});
  TensorList out = ops::compute_in(n.op, n.dtype, {x, branch, weight, bias}, [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    const Device device = k.device();
    Tensor y = Tensor::empty(c[0].shape(), dtype_v<T>, device), rstd = Tensor::empty({n.rows}, dtype_v<T>, device);
    Tensor mean = n.kind == NormKind::layer ? Tensor::empty({n.rows}, dtype_v<T>, device) : Tensor();
    Tensor sum = c[1].defined() ? Tensor::empty(c[0].shape(), dtype_v<T>, device) : Tensor();
    const T* w = data_or_null<T>(c[2]);
    if (n.kind == NormKind::layer && sum.defined()) {
      k->add_layernorm_forward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), c[1].data<T>(), w,
                               data_or_null<T>(c[3]), n.eps, sum.data<T>(), y.data<T>(), mean.data<T>(),
                               rstd.data<T>());
    } else if (n.kind == NormKind::layer) {
      k->layernorm_forward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, data_or_null<T>(c[3]), n.eps,
                           y.data<T>(), mean.data<T>(), rstd.data<T>());
    } else if (sum.defined()) {
      k->add_rmsnorm_forward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), c[1].data<T>(), w, n.eps,
                             sum.data<T>(), y.data<T>(), rstd.data<T>());
    } else {
      k->rmsnorm_forward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, n.eps, y.data<T>(),
                         rstd.data<T>());
    }
    // The norm's input in its own dtype (x, or the sum), not the compute dtype's copy.
    ctx.save_for_backward({sum.defined() ? sum : x, weight, mean, rstd});
    return TensorList{sum, y};
  });
  if (!n.fused) return {out[1]};
  return {rounded_sum.defined() ? rounded_sum : out[0], out[1]};
}

// Backward: the norm's dx of its input, then (fused) dsum = dx + the gradient sum received from its
// other uses, handed to both x and branch as the add's backward does; then the parameters'.
TensorList norm_backward(const NormCall& n, Context& ctx, const TensorList& grad) {
  const TensorList& s = ctx.saved();  // x or sum, weight, mean, rstd
  const Tensor& dy = grad[n.fused ? 1 : 0];
  const Tensor dsum_in = n.fused ? grad[0] : Tensor();
  const std::size_t wi = n.weight_index();
  const ops::Kernels k = ops::kernels_for(n.op, {s[0], s[1], dy});
  const Tensor kernel_dsum_in = n.fused_kernel() ? dsum_in : Tensor();
  TensorList g = ops::compute_in(n.op, n.dtype, {s[0], s[1], s[2], s[3], dy, kernel_dsum_in},
                                 [&](auto tag, const TensorList& c) {
    using T = decltype(tag);
    Tensor dx = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());  // the kernels always write dx
    Tensor dweight = param_grad_buffer<T>(ctx.needs_input_grad(wi), n.cols, k.device());
    Tensor dbias = param_grad_buffer<T>(n.kind == NormKind::layer && ctx.needs_input_grad(wi + 1), n.cols, k.device());
    const T* w = data_or_null<T>(c[1]);
    if (n.kind == NormKind::layer && c[5].defined()) {
      k->add_layernorm_backward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, c[2].data<T>(),
                                c[3].data<T>(), c[4].data<T>(), c[5].data<T>(), dx.data<T>(),
                                data_or_null<T>(dweight), data_or_null<T>(dbias));
    } else if (n.kind == NormKind::layer) {
      k->layernorm_backward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, c[2].data<T>(), c[3].data<T>(),
                            c[4].data<T>(), dx.data<T>(), data_or_null<T>(dweight), data_or_null<T>(dbias));
    } else if (c[5].defined()) {
      k->add_rmsnorm_backward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, c[3].data<T>(),
                              c[4].data<T>(), c[5].data<T>(), dx.data<T>(), data_or_null<T>(dweight));
    } else {
      k->rmsnorm_backward(k.stream, dtype_v<T>, n.rows, n.cols, c[0].data<T>(), w, c[3].data<T>(), c[4].data<T>(),
                          dx.data<T>(), data_or_null<T>(dweight));
    }
    return TensorList{dx, dweight, dbias};
  });
  // 16-bit storage: the add in f32 rounded once, as autograd adds two 16-bit gradients.
  const Tensor dx = n.fused && !n.fused_kernel() ? add(dsum_in, g[0]) : g[0];
  TensorList out{ctx.needs_input_grad(0) ? dx : Tensor()};
  if (n.fused) out.push_back(ctx.needs_input_grad(1) ? dx : Tensor());
  out.push_back(g[1]);
  if (n.kind == NormKind::layer) out.push_back(g[2]);
  return out;
}

TensorList norm_node(NormCall n, const TensorList& in) {
  n.dtype = in[0].dtype();
  n.rows = ops::rows_of(in[0].shape());
  n.cols = in[0].size(-1);
  return autograd::apply_function(
      n.op, in, [n](Context& ctx, const TensorList& inputs) { return norm_forward(n, ctx, inputs); },
      [n](Context& ctx, const TensorList& grad) { return norm_backward(n, ctx, grad); });
}

// The fused add's own checks: branch is x's twin.
void check_branch(const char* op, const Tensor& x, const Tensor& branch) {
  ops::check_same_dtype_device(op, x, branch);
  WF_CHECK(branch.shape() == x.shape(),
           "{}: branch has shape {} but x has shape {}; the residual add takes two tensors of one shape (add() "
           "broadcasts, this op does not)",
           op, shape_str(branch.shape()), shape_str(x.shape()));
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  static constexpr const char* op = "layer_norm";
  check_norm_args(op, x, {{&weight, "weight"}, {&bias, "bias"}}, eps);
  return norm_node({op, NormKind::layer, false, eps, {}, 0, 0}, {x, weight, bias})[0];
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  static constexpr const char* op = "rms_norm";
  check_norm_args(op, x, {{&weight, "weight"}}, eps);
  return norm_node({op, NormKind::rms, false, eps, {}, 0, 0}, {x, weight})[0];
}

AddNorm add_layer_norm(const Tensor& x, const Tensor& branch, const Tensor& weight, const Tensor& bias, double eps) {
  static constexpr const char* op = "add_layer_norm";
  check_norm_args(op, x, {{&weight, "weight"}, {&bias, "bias"}}, eps);
  check_branch(op, x, branch);
  const TensorList out = norm_node({op, NormKind::layer, true, eps, {}, 0, 0}, {x, branch, weight, bias});
  return {out[0], out[1]};
}

AddNorm add_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& weight, double eps) {
  static constexpr const char* op = "add_rms_norm";
  check_norm_args(op, x, {{&weight, "weight"}}, eps);
  check_branch(op, x, branch);
  const TensorList out = norm_node({op, NormKind::rms, true, eps, {}, 0, 0}, {x, branch, weight});
  return {out[0], out[1]};
}

}  // namespace wf
