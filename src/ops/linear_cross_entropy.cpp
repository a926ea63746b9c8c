// The output head and its cross-entropy fused over chunks of rows (ops/loss.h), on the existing
// backend entries only — linear's product, the cross-entropy kernels, gemm / gemm_bf16 — so it
// runs wherever those do (the CPU, the test device, CUDA) with no kernel of its own.
//
// Why the gradients are taken in the forward (Liger-Kernel's choice) rather than recomputing each
// chunk's logits in the backward from the saved log-sum-exp: both hold one chunk's logits at a
// time, but recomputing costs a fourth GEMM per chunk ([rows, d]·[d, V] again), and the head is a
// large share of a small model's FLOPs (GPT-2 small: about a third). The price is holding the
// gradients of h [N, d] and the weight [V, d] (compute dtype) from the forward to the backward,
// and a forward under grad mode that is never differentiated computes them for nothing (the
// trainer evaluates under NoGradGuard, which skips them). The backward scales them by the
// upstream gradient: exact for the trainer's loss SUM, whose gradient is 1.
#include <algorithm>

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/ops/loss.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

constexpr const char* kOp = "linear_cross_entropy_sum";

// C (the compute dtype, f32 for bf16 operands) = op(A)·op(B) + beta·C over operands of dtype
// `operands`: gemm_bf16 for bf16 (f32 accumulation and result), gemm otherwise. The same entries
// linear's backward multiplies on, so a chunk's gradient rows are its products' rows.
void gemm_to(const ops::Kernels& k, DType operands, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
             const Tensor& A, std::int64_t lda, const Tensor& B, std::int64_t ldb, double beta, void* C,
             std::int64_t ldc) {
  if (operands == DType::bf16) {
    k->gemm_bf16(k.stream, ta, tb, M, N, K, 1.0f, A.data<bf16>(), lda, B.data<bf16>(), ldb, static_cast<float>(beta),
                 static_cast<float*>(C), ldc);
  } else {
    k->gemm(k.stream, operands, ta, tb, M, N, K, 1.0, A.raw_data(), lda, B.raw_data(), ldb, beta, C, ldc);
  }
}

// inputs: h [N, d], weight [V, d], targets i64 [N]; output: the loss sum (the weight's dtype).
class LinearCrossEntropy final : public autograd::Function {
 public:
  LinearCrossEntropy(std::int64_t ignore_index, std::int64_t chunk_rows, DType h_dtype, DType w_dtype)
      : ignore_index_(ignore_index), chunk_rows_(chunk_rows), h_dtype_(h_dtype), w_dtype_(w_dtype) {}

  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor &h = in[0], &weight = in[1], &targets = in[2];
    const std::int64_t N = h.size(0), d = h.size(1), V = weight.size(0);
    const DType operands = h.dtype(), ce = ops::compute_dtype(kOp, weight.dtype());
    const ops::Kernels k = ops::kernels_for(kOp, {h, weight, targets});
    const std::size_t ce_size = dtype_size(ce);
    // The weight operand once for all chunks: linear would make its bf16 copy per call.
    const Tensor w = weight.to(operands);
    const bool grad_h = ctx.needs_input_grad(0), grad_w = ctx.needs_input_grad(1);
    Tensor losses = Tensor::empty({N}, ce, k.device()), lse = Tensor::empty({N}, ce, k.device());
    Tensor count = Tensor::empty({}, DType::i64, k.device());  // each chunk's, unread: the sum needs none
    Tensor dh = grad_h ? Tensor::empty({N, d}, ce, k.device()) : Tensor();
    // Accumulated over the chunks; zeros when there are none (the GEMMs write it otherwise).
    Tensor dw = grad_w ? (N == 0 ? Tensor::zeros({V, d}, ce, k.device()) : Tensor::empty({V, d}, ce, k.device()))
                       : Tensor();
    const Tensor one = Tensor::full({}, 1.0, ce, k.device());
    auto* const losses_at = static_cast<char*>(losses.raw_data());
    auto* const lse_at = static_cast<char*>(lse.raw_data());
    const std::int64_t* const target_at = targets.data<std::int64_t>();
    for (std::int64_t start = 0; start < N; start += chunk_rows_) {
      const std::int64_t rows = std::min(chunk_rows_, N - start);
      const Tensor hc = h.slice0(start, start + rows);
      // The unfused path's logits rows: linear's product and rounding, then the cast to the masters'.
      const Tensor logits = linear(hc, w).to(ce);
      const auto row_offset = static_cast<std::size_t>(start) * ce_size;
      k->cross_entropy_forward(k.stream, ce, rows, V, logits.raw_data(), target_at + start, ignore_index_,
                               losses_at + row_offset, lse_at + row_offset, count.data<std::int64_t>());
      if (!grad_h && !grad_w) continue;
      Tensor dlogits = Tensor::empty({rows, V}, ce, k.device());
      k->cross_entropy_backward(k.stream, ce, rows, V, logits.raw_data(), target_at + start, ignore_index_,
                                lse_at + row_offset, one.raw_data(), nullptr, dlogits.raw_data(), nullptr);
      // The cast's backward: linear sees its output's gradient in its own dtype (bf16 rounds here).
      const Tensor g = dlogits.to(operands);
      dlogits = Tensor();
      if (grad_h) {
        gemm_to(k, operands, false, false, rows, d, V, g, V, w, d, 0.0,
                static_cast<char*>(dh.raw_data()) + static_cast<std::size_t>(start * d) * ce_size, d);
      }
      if (grad_w) gemm_to(k, operands, true, false, V, d, rows, g, V, hc, d, start == 0 ? 0.0 : 1.0, dw.raw_data(), d);
    }
    Tensor loss = Tensor::empty({}, ce, k.device());
    // One reduction over every row, as cross_entropy_sum sums them: the same loss bit for bit.
    k->cross_entropy_reduce(k.stream, ce, N, losses.raw_data(), nullptr, loss.raw_data());
    ctx.save_for_backward({dh, dw});
    return {loss.to(weight.dtype())};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    const Tensor &dh = ctx.saved()[0], &dw = ctx.saved()[1];
    const Tensor scale = grad[0].to(dh.defined() ? dh.dtype() : dw.dtype());
    // Scaled in the compute dtype, rounded once to each input's dtype.
    const Tensor dh_out = ctx.needs_input_grad(0) ? mul(dh, scale).to(h_dtype_) : Tensor();
    const Tensor dw_out = ctx.needs_input_grad(1) ? mul(dw, scale).to(w_dtype_) : Tensor();
    return {dh_out, dw_out, Tensor()};
  }

  std::string name() const override { return kOp; }

 private:
  std::int64_t ignore_index_, chunk_rows_;
  DType h_dtype_, w_dtype_;  // the gradients' dtypes
};

}  // namespace

std::int64_t linear_cross_entropy_chunk_rows(std::int64_t vocab) {
  constexpr std::int64_t kChunkBytes = std::int64_t{256} << 20;
  // Divided, not multiplied: an absurd vocabulary (validate's facts see any config) must not wrap.
  return std::max<std::int64_t>(1, kChunkBytes / 4 / std::max<std::int64_t>(vocab, 1));
}

Tensor linear_cross_entropy_sum(const Tensor& h, const Tensor& weight, const Tensor& targets, std::int64_t ignore_index,
                                std::int64_t chunk_rows) {
  ops::check_floating(kOp, h, "h");
  ops::check_floating(kOp, weight, "weight");
  ops::check_defined(kOp, targets, "targets");
  ops::kernels_for(kOp, {h, weight, targets});  // one device
  const bool mixed = h.dtype() == DType::bf16 && weight.dtype() == DType::f32;
  WF_CHECK(mixed || h.dtype() == weight.dtype(),
           "{}: h is {} but the weight is {}; they must share a dtype, or be bf16 activations against f32 masters "
           "(nn/precision.h)",
           kOp, dtype_name(h.dtype()), dtype_name(weight.dtype()));
  WF_CHECK(h.dim() >= 1 && weight.dim() == 2 && h.size(-1) == weight.size(1),
           "{}: h of shape {} does not fit the weight of shape {}; expected h [..., d] and weight [vocab, d]", kOp,
           shape_str(h.shape()), shape_str(weight.shape()));
  WF_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
           "{}: targets have dtype {}, but class indices must be i64 (or i32); convert with cast()", kOp,
           dtype_name(targets.dtype()));
  const Shape expected(h.shape().begin(), h.shape().end() - 1);
  WF_CHECK(targets.shape() == expected,
           "{}: targets of shape {} do not match h of shape {}; targets must have h's shape without the last "
           "(feature) dim, i.e. {}",
           kOp, shape_str(targets.shape()), shape_str(h.shape()), shape_str(expected));
  WF_CHECK(chunk_rows >= 0, "{}: chunk_rows is {}; pass a positive number of rows, or 0 for the default", kOp,
           chunk_rows);
  const std::int64_t d = h.size(-1), N = ops::rows_of(h.shape());
  auto fn = std::make_shared<LinearCrossEntropy>(
      ignore_index, chunk_rows > 0 ? chunk_rows : linear_cross_entropy_chunk_rows(weight.size(0)), h.dtype(),
      weight.dtype());
  return autograd::apply_function(fn, {reshape(h, {N, d}), weight, reshape(targets.to(DType::i64), {N})})[0];
}

}  // namespace wf
