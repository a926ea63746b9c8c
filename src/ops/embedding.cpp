// Token embedding lookup on its device's embedding kernels (kernels/backend.h): a gather forward and a deterministic
// scatter-add backward into the table.
#include "wallfacer/ops/embedding.h"

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"

namespace wf {

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  static constexpr const char* op = "embedding";
  ops::check_defined(op, ids, "ids");
  WF_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
           "{}: ids have dtype {}, but token ids must be i64 or i32; convert with cast()", op,
           dtype_name(ids.dtype()));
  ops::check_floating(op, weight, "weight");
  const ops::Kernels k = ops::kernels_for(op, {ids, weight});
  WF_CHECK(weight.dim() == 2, "{}: weight must be a [vocab, dim] table, got shape {}", op, shape_str(weight.shape()));

  const std::int64_t vocab = weight.size(0), dim = weight.size(1), tokens = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  const DType dtype = weight.dtype();
  // The kernel takes i64 ids; the out-of-range check (naming the id, its position and the
  // vocabulary size) happens in the kernel, before anything is written.
  return autograd::apply_function(
      op, {ids.to(DType::i64), weight},
      [=](autograd::Context& ctx, const autograd::TensorList& in) {
        ctx.save_for_backward({in[0]});
        // bf16/f16 tables are widened to f32 as a whole by compute_in: correct, but O(vocab·dim)
        // per call; a 16-bit gather would avoid it if such tables ever matter on the CPU.
        return autograd::TensorList{ops::compute_in(op, dtype, in, [&](auto tag, const autograd::TensorList& c) {
          using T = decltype(tag);
          Tensor out = Tensor::empty(out_shape, dtype_v<T>, k.device());
          k->embedding_forward(k.stream, dtype_v<T>, tokens, dim, vocab, c[1].data<T>(), c[0].data<std::int64_t>(),
                               out.data<T>());
          return out;
        })};
      },
      [=](autograd::Context& ctx, const autograd::TensorList& grad) {
        if (!ctx.needs_input_grad(1)) return autograd::TensorList{Tensor(), Tensor()};
        const Tensor& ids64 = ctx.saved()[0];
        Tensor dweight = ops::compute_in(op, dtype, {grad[0]}, [&](auto tag, const autograd::TensorList& c) {
          using T = decltype(tag);
          Tensor d = Tensor::zeros({vocab, dim}, dtype_v<T>, k.device());  // the kernel accumulates
          k->embedding_backward(k.stream, dtype_v<T>, tokens, dim, vocab, ids64.data<std::int64_t>(), c[0].data<T>(),
                                d.data<T>());
          return d;
        });
        return autograd::TensorList{Tensor(), dweight};
      })[0];
}

}  // namespace wf
