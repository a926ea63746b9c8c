// Rotary position embedding on its device's rope kernel (kernels/backend.h). The rotation is orthogonal: its backward is
// the same kernel rotating by −angle, so nothing but the positions is saved.
#include "wallfacer/ops/rope.h"

#include "src/ops/common.h"
#include "src/ops/rope_positions.h"
#include "wallfacer/autograd/function.h"

namespace wf {

ops::RopeRows ops::rope_rows(const char* op, const Tensor& positions, std::int64_t batch, std::int64_t tokens,
                             const Shape& x_shape) {
  WF_CHECK(positions.dtype() == DType::i64 || positions.dtype() == DType::i32,
           "{}: positions have dtype {}, but must be i64 or i32 token positions; convert with cast()", op,
           dtype_name(positions.dtype()));
  const bool per_row = positions.dim() == 2;
  WF_CHECK((positions.dim() == 1 && positions.size(0) == tokens) ||
               (per_row && positions.size(0) == batch && positions.size(1) == tokens),
           "{}: positions must be [tokens] = [{}] or per row [batch, tokens] = [{}, {}] (one position per token of the input "
           "{}), got shape {}",
           op, tokens, batch, tokens, shape_str(x_shape), shape_str(positions.shape()));
  return per_row ? RopeRows{1, batch * tokens} : RopeRows{batch, tokens};
}

Tensor rope(const Tensor& x, const Tensor& positions, double theta) {
  static constexpr const char* op = "rope";
  ops::check_floating(op, x, "x");
  WF_CHECK(x.dim() == 4, "{}: x must be [batch, tokens, heads, head_dim], got shape {}", op, shape_str(x.shape()));
  ops::check_defined(op, positions, "positions");
  const ops::Kernels k = ops::kernels_for(op, {x, positions});
  const ops::RopeRows rows = ops::rope_rows(op, positions, x.size(0), x.size(1), x.shape());
  const kernels::RopeShape shape{rows.batch, rows.tokens, x.size(2), x.size(3), theta};
  kernels::check_rope_shape(shape, op);

  const DType dtype = x.dtype();
  // forward and backward differ only in the direction of the rotation.
  const auto rotate = [=](const Tensor& in, const Tensor& pos, bool inverse) {
    return ops::compute_in(op, dtype, {in, pos}, [&](auto tag, const autograd::TensorList& c) {
      using T = decltype(tag);
      Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
      k->rope(k.stream, dtype_v<T>, shape, c[0].data<T>(), c[1].data<std::int64_t>(), inverse, out.data<T>());
      return out;
    });
  };
  return autograd::apply_function(
      op, {x, positions.to(DType::i64)},
      [=](autograd::Context& ctx, const autograd::TensorList& in) {
        ctx.save_for_backward({in[1]});
        return autograd::TensorList{rotate(in[0], in[1], /*inverse=*/false)};
      },
      [=](autograd::Context& ctx, const autograd::TensorList& grad) {
        if (!ctx.needs_input_grad(0)) return autograd::TensorList{Tensor(), Tensor()};
        return autograd::TensorList{rotate(grad[0], ctx.saved()[0], /*inverse=*/true), Tensor()};
      })[0];
}

}  // namespace wf
