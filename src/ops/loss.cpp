// Mean softmax cross-entropy on the fused kernels of kernels/cpu/cross_entropy.h. The forward
// keeps one log-sum-exp per row (never the probabilities); the backward recomputes softmax
// from it straight into the logits' gradient.
#include "wallfacer/ops/loss.h"

#include "kernels/cpu/cross_entropy.h"
#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

constexpr const char* kOp = "cross_entropy";

// A Function rather than two lambdas because the backward needs a number the forward finds:
// how many rows were not ignored (the mean's denominator).
class CrossEntropy final : public autograd::Function {
 public:
  CrossEntropy(std::int64_t ignore_index, bool sum) : ignore_index_(ignore_index), sum_(sum) {}

  // inputs: logits [rows, vocab] (any leading shape), targets i64 [rows]
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor& targets = in[1];
    const std::int64_t rows = ops::rows_of(in[0].shape()), vocab = in[0].size(-1);
    return {ops::compute_in(kOp, in[0].dtype(), {in[0]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor losses = Tensor::empty({rows}, dtype_v<T>), lse = Tensor::empty({rows}, dtype_v<T>);
      count_ = kernels::cpu::cross_entropy_forward<T>(rows, vocab, c[0].data<T>(), targets.data<std::int64_t>(),
                                                       ignore_index_, losses.data<T>(), lse.data<T>());
      ctx.save_for_backward({in[0], targets, lse});  // lse in the compute dtype
      const T loss = sum_ ? kernels::cpu::cross_entropy_sum<T>(rows, losses.data<T>())
                          : kernels::cpu::cross_entropy_mean<T>(rows, losses.data<T>(), count_);
      return Tensor::scalar(double(loss), dtype_v<T>);
    })};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    if (!ctx.needs_input_grad(0)) return {Tensor(), Tensor()};
    const TensorList& s = ctx.saved();  // logits, targets, lse
    const Tensor& targets = s[1];
    const std::int64_t rows = ops::rows_of(s[0].shape()), vocab = s[0].size(-1);
    // d(mean)/d(loss_r) = 1/count (d(sum)/d(loss_r) = 1), times the upstream gradient of the
    // scalar loss. With every row ignored the loss is the constant 0 and every gradient is 0.
    const double grad_scale = sum_ ? grad[0].item() : count_ > 0 ? grad[0].item() / double(count_) : 0.0;
    Tensor dlogits = ops::compute_in(kOp, s[0].dtype(), {s[0], s[2]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor d = Tensor::empty(c[0].shape(), dtype_v<T>);
      kernels::cpu::cross_entropy_backward<T>(rows, vocab, c[0].data<T>(), targets.data<std::int64_t>(),
                                              ignore_index_, c[1].data<T>(), grad_scale, d.data<T>());
      return d;
    });
    return {dlogits, Tensor()};
  }

  std::string name() const override { return kOp; }

 private:
  std::int64_t ignore_index_;
  bool sum_;
  std::int64_t count_ = 0;
};

Tensor apply_cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, bool sum) {
  ops::check_floating(kOp, logits, "logits");
  ops::check_cpu(kOp, logits);
  ops::check_min_dim(kOp, logits, 1, "logits");
  ops::check_defined(kOp, targets, "targets");
  ops::check_cpu(kOp, targets);
  WF_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
           "{}: targets have dtype {}, but class indices must be i64 (or i32); convert with cast()", kOp,
           dtype_name(targets.dtype()));
  const Shape expected(logits.shape().begin(), logits.shape().end() - 1);
  WF_CHECK(targets.shape() == expected,
           "{}: targets of shape {} do not match logits of shape {}; targets must have the logits' shape without "
           "the last (vocabulary) dim, i.e. {}",
           kOp, shape_str(targets.shape()), shape_str(logits.shape()), shape_str(expected));
  return autograd::apply_function(std::make_shared<CrossEntropy>(ignore_index, sum), {logits, targets.to(DType::i64)})[0];
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  return apply_cross_entropy(logits, targets, ignore_index, /*sum=*/false);
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  return apply_cross_entropy(logits, targets, ignore_index, /*sum=*/true);
}

std::int64_t count_targets(const Tensor& targets, std::int64_t ignore_index) {
  WF_CHECK(targets.defined(), "count_targets: the targets are undefined");
  const Tensor t = targets.to(DType::i64);
  const std::int64_t* p = t.data<std::int64_t>();
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) count += p[i] != ignore_index;
  return count;
}

}  // namespace wf
