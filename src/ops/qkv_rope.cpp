// split_qkv_rope: SelfAttention's QKV split and RoPE as one node on one backend entry each way
// (kernels/backend.h qkv_rope_forward / qkv_rope_backward). Like rope(), nothing but the positions
// is saved: the backward is the transpose of a copy and an orthogonal rotation.
#include "src/ops/common.h"
#include "src/ops/rope_positions.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/rope.h"

namespace wf {
namespace {

using autograd::TensorList;

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

QkvHeads split_qkv_rope(const Tensor& projected, std::int64_t groups, std::int64_t group_size, std::int64_t head_dim,
                        const Tensor& positions, double theta) {
  static constexpr const char* op = "split_qkv_rope";
  ops::check_floating(op, projected, "projected");
  WF_CHECK(projected.dim() == 3, "{}: projected must be [batch, tokens, groups·(group_size + 2)·head_dim], got shape {}",
           op, shape_str(projected.shape()));
  WF_CHECK(groups > 0 && group_size > 0 && head_dim > 0 && projected.size(2) == groups * (group_size + 2) * head_dim,
           "{}: projected's last dim is {}, but groups·(group_size + 2)·head_dim = {}·({} + 2)·{} = {} (per kv group: "
           "its query heads, its key head, its value head); pass the layer's own head counts",
           op, projected.size(2), groups, group_size, head_dim, groups * (group_size + 2) * head_dim);
  const bool rotate = positions.defined();
  const ops::Kernels k = ops::kernels_for(op, {projected, positions});
  const std::int64_t batch = projected.size(0), tokens = projected.size(1);
  const ops::RopeRows rows =
      rotate ? ops::rope_rows(op, positions, batch, tokens, projected.shape()) : ops::RopeRows{batch, tokens};
  const kernels::QkvRopeShape shape{rows.batch, rows.tokens, groups, group_size, head_dim, rotate, theta};
  kernels::check_qkv_rope_shape(shape, op);

  const DType dtype = projected.dtype();
  const Shape projected_shape = projected.shape(), q_shape{batch, tokens, groups * group_size, head_dim},
              kv_shape{batch, tokens, groups, head_dim};
  const TensorList out = autograd::apply_function(
      op, {projected, rotate ? positions.to(DType::i64) : Tensor()},
      [=](autograd::Context& ctx, const TensorList& in) {
        ctx.save_for_backward({in[1]});
        // bf16/f16 run in f32 and round back once, as rope() does: the composition's bits.
        return ops::compute_in(op, dtype, {in[0], in[1]}, [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor q = Tensor::empty(q_shape, dtype_v<T>, k.device()), key = Tensor::empty(kv_shape, dtype_v<T>, k.device()),
                 v = Tensor::empty(kv_shape, dtype_v<T>, k.device());
          k->qkv_rope_forward(k.stream, dtype_v<T>, shape, c[0].data<T>(), data_or_null<std::int64_t>(c[1]),
                              q.data<T>(), key.data<T>(), v.data<T>());
          return TensorList{q, key, v};
        });
      },
      [=](autograd::Context& ctx, const TensorList& grad) {
        if (!ctx.needs_input_grad(0)) return TensorList{Tensor(), Tensor()};
        const Tensor d = ops::compute_in(op, dtype, {grad[0], grad[1], grad[2], ctx.saved()[0]},
                                         [&](auto tag, const TensorList& c) {
          using T = decltype(tag);
          Tensor d_projected = Tensor::empty(projected_shape, dtype_v<T>, k.device());
          k->qkv_rope_backward(k.stream, dtype_v<T>, shape, data_or_null<T>(c[0]), data_or_null<T>(c[1]),
                               data_or_null<T>(c[2]), data_or_null<std::int64_t>(c[3]), d_projected.data<T>());
          return d_projected;
        });
        return TensorList{d, Tensor()};
      });
  return {out[0], out[1], out[2]};
}

}  // namespace wf
