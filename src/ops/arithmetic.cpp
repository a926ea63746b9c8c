// Elementwise arithmetic with broadcasting. Every op is one apply_function call: the forward
// runs a kernel of its device's backend (kernels/backend.h), the backward is written with the same ops and
// sums broadcast gradients back to each operand's shape with sum_to_shape.
#include "wallfacer/ops/arithmetic.h"

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/reduction.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;
using kernels::BinaryOp;

Shape broadcast_shapes_for(std::string_view op, const Shape& a, const Shape& b) {
  const std::size_t nd = std::max(a.size(), b.size());
  const Shape pa = ops::right_aligned(a, nd), pb = ops::right_aligned(b, nd);
  Shape out(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    WF_CHECK(pa[d] == pb[d] || pa[d] == 1 || pb[d] == 1,
             "{}: shapes {} and {} do not broadcast (dim {} from the end: {} vs {}); extents must be equal or 1", op,
             shape_str(a), shape_str(b), nd - d, pa[d], pb[d]);
    out[d] = pa[d] == 1 ? pb[d] : pa[d];
  }
  return out;
}

// out = a (op) b, broadcast to out_shape, in a's dtype.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  const ops::Kernels k = ops::kernels_for(kernels::binary_op_name(op), {a, b});
  return ops::compute_in(kernels::binary_op_name(op), a.dtype(), {a, b}, [&](auto tag, const TensorList& in) {
    using T = decltype(tag);
    const std::size_t nd = out_shape.size();
    const Shape sa = ops::right_aligned(in[0].shape(), nd), sb = ops::right_aligned(in[1].shape(), nd);
    Tensor out = Tensor::empty(out_shape, dtype_v<T>, k.device());
    k->binary_broadcast(k.stream, dtype_v<T>, op, in[0].data<T>(), sa, in[1].data<T>(), sb, out.data<T>(), out_shape);
    return out;
  });
}

// The gradient of a binary op with respect to each operand, before summing back to its shape.
TensorList binary_grads(BinaryOp op, const Context& ctx, const Tensor& g) {
  const bool need_a = ctx.needs_input_grad(0), need_b = ctx.needs_input_grad(1);
  switch (op) {
    case BinaryOp::add: return {need_a ? g : Tensor(), need_b ? g : Tensor()};
    case BinaryOp::sub: return {need_a ? g : Tensor(), need_b ? neg(g) : Tensor()};
    case BinaryOp::mul: {
      const Tensor &a = ctx.saved()[0], &b = ctx.saved()[1];
      return {need_a ? mul(g, b) : Tensor(), need_b ? mul(g, a) : Tensor()};
    }
    case BinaryOp::div: {  // d(a/b)/db = −a/b²
      const Tensor &a = ctx.saved()[0], &b = ctx.saved()[1];
      return {need_a ? div(g, b) : Tensor(), need_b ? neg(div(mul(g, a), mul(b, b))) : Tensor()};
    }
  }
  WF_FAIL("binary op {} has no gradient", static_cast<int>(op));
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::binary_op_name(op);
  ops::check_same_dtype_device(name, a, b);
  const Shape out_shape = broadcast_shapes_for(name, a.shape(), b.shape());
  const Shape a_shape = a.shape(), b_shape = b.shape();
  const bool saves_operands = op == BinaryOp::mul || op == BinaryOp::div;
  return autograd::apply_function(
      name, {a, b},
      [=](Context& ctx, const TensorList& in) {
        if (saves_operands) ctx.save_for_backward({in[0], in[1]});
        return TensorList{binary_forward(op, in[0], in[1], out_shape)};
      },
      [=](Context& ctx, const TensorList& grad) {
        TensorList g = binary_grads(op, ctx, grad[0]);
        if (g[0].defined()) g[0] = sum_to_shape(g[0], a_shape);
        if (g[1].defined()) g[1] = sum_to_shape(g[1], b_shape);
        return g;
      })[0];
}

// y = alpha·x + shift with dy/dx = alpha: neg, scale and add_scalar.
Tensor affine(const char* name, const Tensor& x, double alpha, double shift) {
  ops::check_floating(name, x, "the input");
  return autograd::apply_function(
      name, {x},
      [=](Context&, const TensorList& in) {
        const ops::Kernels k = ops::kernels_for(name, {in[0]});
        return TensorList{ops::compute_in(name, in[0].dtype(), in, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
          k->affine(k.stream, dtype_v<T>, out.numel(), alpha, shift, c[0].data<T>(), out.data<T>());
          return out;
        })};
      },
      [=](Context&, const TensorList& grad) { return TensorList{alpha == 1.0 ? grad[0] : scale(grad[0], alpha)}; })[0];
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) { return broadcast_shapes_for("broadcast_shapes", a, b); }

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }

Tensor neg(const Tensor& x) { return affine("neg", x, -1.0, 0.0); }
Tensor scale(const Tensor& x, double alpha) { return affine("scale", x, alpha, 0.0); }
Tensor add_scalar(const Tensor& x, double value) { return affine("add_scalar", x, 1.0, value); }

Tensor bias_residual_add(const Tensor& x, const Tensor& bias, const Tensor& residual) {
  constexpr const char* name = "bias_residual_add";
  ops::check_same_dtype_device(name, x, bias);
  ops::check_same_dtype_device(name, x, residual);
  ops::check_min_dim(name, x, 1, "x");
  WF_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
           "{}: bias of shape {} does not match the last dim of x {}; expected [{}]", name, shape_str(bias.shape()),
           shape_str(x.shape()), x.size(-1));
  WF_CHECK(residual.shape() == x.shape(), "{}: residual of shape {} does not match x of shape {}", name,
           shape_str(residual.shape()), shape_str(x.shape()));
  const Shape bias_shape = bias.shape();
  return autograd::apply_function(
      name, {x, bias, residual},
      [=](Context&, const TensorList& in) {
        const ops::Kernels k = ops::kernels_for(name, {in[0], in[1], in[2]});
        return TensorList{ops::compute_in(name, in[0].dtype(), in, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
          const std::int64_t cols = c[1].numel();
          k->bias_residual_add(k.stream, dtype_v<T>, ops::rows_of(c[0].shape()), cols, c[0].data<T>(),
                               c[1].data<T>(), c[2].data<T>(), out.data<T>());
          return out;
        })};
      },
      [=](Context& ctx, const TensorList& grad) {
        const Tensor& g = grad[0];
        return TensorList{ctx.needs_input_grad(0) ? g : Tensor(),
                          ctx.needs_input_grad(1) ? sum_to_shape(g, bias_shape) : Tensor(),
                          ctx.needs_input_grad(2) ? g : Tensor()};
      })[0];
}

}  // namespace wf
