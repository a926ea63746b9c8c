// Mean softmax cross-entropy on its device's fused kernels (kernels/backend.h). The forward
// keeps one log-sum-exp per row (never the probabilities); the backward recomputes softmax
// from it straight into the logits' gradient. The count of rows that are not ignored (the mean's
// denominator) and the upstream gradient stay on the device: nothing here reads the host.
#include "wallfacer/ops/loss.h"

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/ops/count.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;

constexpr const char* kOp = "cross_entropy";

// A Function rather than two lambdas for its options; the count of rows that are not ignored
// (the mean's denominator) is a device scalar the forward saves for the backward.
class CrossEntropy final : public autograd::Function {
 public:
  CrossEntropy(std::int64_t ignore_index, bool sum) : ignore_index_(ignore_index), sum_(sum) {}

  // inputs: logits [rows, vocab] (any leading shape), targets i64 [rows]
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor& targets = in[1];
    const std::int64_t rows = ops::rows_of(in[0].shape()), vocab = in[0].size(-1);
    const ops::Kernels k = ops::kernels_for(kOp, {in[0], targets});
    return {ops::compute_in(kOp, in[0].dtype(), {in[0]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor losses = Tensor::empty({rows}, dtype_v<T>, k.device()), lse = Tensor::empty({rows}, dtype_v<T>, k.device());
      Tensor count = Tensor::empty({}, DType::i64, k.device()), loss = Tensor::empty({}, dtype_v<T>, k.device());
      k->cross_entropy_forward(k.stream, dtype_v<T>, rows, vocab, c[0].data<T>(), targets.data<std::int64_t>(),
                               ignore_index_, losses.data<T>(), lse.data<T>(), count.data<std::int64_t>());
      ctx.save_for_backward({in[0], targets, lse, count});  // lse in the compute dtype
      k->cross_entropy_reduce(k.stream, dtype_v<T>, rows, losses.data<T>(),
                              sum_ ? nullptr : count.data<std::int64_t>(), loss.data<T>());
      return loss;
    })};
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    if (!ctx.needs_input_grad(0)) return {Tensor(), Tensor()};
    const TensorList& s = ctx.saved();  // logits, targets, lse, count
    const Tensor &targets = s[1], &count = s[3];
    const std::int64_t rows = ops::rows_of(s[0].shape()), vocab = s[0].size(-1);
    const ops::Kernels k = ops::kernels_for(kOp, {s[0], grad[0]});
    // The kernel scales by the upstream gradient of the reduced loss, divided by the count for
    // the mean; both are device scalars.
    Tensor dlogits = ops::compute_in(kOp, s[0].dtype(), {s[0], s[2], grad[0]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor d = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
      k->cross_entropy_backward(k.stream, dtype_v<T>, rows, vocab, c[0].data<T>(), targets.data<std::int64_t>(),
                                ignore_index_, c[1].data<T>(), c[2].data<T>(),
                                sum_ ? nullptr : count.data<std::int64_t>(), d.data<T>(), nullptr);
      return d;
    });
    return {dlogits, Tensor()};
  }

  std::string name() const override { return kOp; }

 private:
  std::int64_t ignore_index_;
  bool sum_;
};

Tensor apply_cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, bool sum) {
  ops::check_floating(kOp, logits, "logits");
  ops::check_min_dim(kOp, logits, 1, "logits");
  ops::check_defined(kOp, targets, "targets");
  ops::kernels_for(kOp, {logits, targets});  // one device
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
  // The device count read back (the copy is the host synchronisation on a device): one counting
  // kernel serves both.
  return count_targets_device(targets, ignore_index).to(Device::cpu()).data<std::int64_t>()[0];
}

}  // namespace wf
