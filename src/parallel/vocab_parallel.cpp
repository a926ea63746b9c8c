// Vocabulary-parallel embedding and cross-entropy (vocab_parallel.h).
#include "wallfacer/parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/core/error.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/embedding.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/parallel/tensor_parallel.h"

namespace wf::parallel {
namespace {

using autograd::Context;
using autograd::TensorList;

constexpr const char* kLoss = "vocab_parallel_cross_entropy";

nn::ParameterShard vocab_rows(const nn::EmbeddingOptions& options, comm::Group& tp) {
  WF_CHECK(options.num_embeddings > 0 && options.dim > 0,
           "VocabParallelEmbedding: num_embeddings and dim must be positive, got {} and {}", options.num_embeddings,
           options.dim);
  return nn::ParameterShard::split_padded(tp.name(), {padded_vocab_size(options.num_embeddings, tp.size()), options.dim},
                                          0, tp.size(), tp.rank(), options.num_embeddings);
}

// The loss is a function of every rank's shard, computed identically (replicated) on each, so
// by collectives.h's convention it is counted once and each shard's gradient is its own slice
// of the whole gradient: the backward needs no communication.
class VocabParallelCrossEntropy final : public autograd::Function {
 public:
  VocabParallelCrossEntropy(comm::Group& tp, std::int64_t vocab_size, std::int64_t ignore_index,
                            LossReduction reduction)
      : tp_(&tp), vocab_size_(vocab_size), ignore_index_(ignore_index), reduction_(reduction) {}

  // inputs: logits_shard [rows, k] (any leading shape), targets i64 [rows]
  TensorList forward(Context& ctx, const TensorList& in) override {
    const Tensor& targets = in[1];
    const std::int64_t rows = ops::rows_of(in[0].shape()), k = in[0].size(-1);
    const ops::Kernels kern = ops::kernels_for(kLoss, {in[0], targets});
    const Device device = kern.device();
    const std::int64_t* tgt = targets.data<std::int64_t>();
    // Every target checked before any collective: they are replicated, so all ranks throw alike.
    // The count of those not ignored (the mean's denominator) stays a device scalar.
    count_ = Tensor::empty({}, DType::i64, device);
    kern->count_targets(kern.stream, kLoss, rows, vocab_size_, tgt, ignore_index_, count_.data<std::int64_t>());
    // Per row, in double: the max, then [sum of exp(x - max) | the target logit].
    Tensor max = Tensor::empty({rows}, DType::f64, device), sums = Tensor::empty({2 * rows}, DType::f64, device);
    const std::int64_t start = tp_->rank() * k, own = real_columns(k);
    ops::compute_in(kLoss, in[0].dtype(), {in[0]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      kern->vocab_parallel_row_max(kern.stream, dtype_v<T>, rows, k, own, c[0].data<T>(), max.data<double>());
      tp_->all_reduce(max, comm::ReduceOp::max);
      kern->vocab_parallel_partials(kern.stream, dtype_v<T>, rows, k, own, start, c[0].data<T>(), max.data<double>(),
                                    tgt, ignore_index_, sums.data<double>());
      return Tensor();
    });
    tp_->all_reduce(sums);
    Tensor lse = Tensor::empty({rows}, DType::f64, device), loss = Tensor::empty({}, DType::f64, device);
    kern->vocab_parallel_loss(kern.stream, rows, max.data<double>(), sums.data<double>(), tgt, ignore_index_,
                              reduction_ == LossReduction::sum ? nullptr : count_.data<std::int64_t>(),
                              lse.data<double>(), loss.data<double>());
    ctx.save_for_backward({in[0], targets, lse});
    return {loss.to(in[0].dtype())};  // rounded from double once, as Tensor::scalar(loss, dtype) rounds
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    if (!ctx.needs_input_grad(0)) return {Tensor(), Tensor()};
    const TensorList& s = ctx.saved();  // logits_shard, targets, lse
    const std::int64_t rows = ops::rows_of(s[0].shape()), k = s[0].size(-1);
    const ops::Kernels kern = ops::kernels_for(kLoss, {s[0], grad[0]});
    const std::int64_t start = tp_->rank() * k, own = real_columns(k);
    // The kernel scales by the upstream gradient (a device scalar), divided by the count for the mean.
    Tensor dlogits = ops::compute_in(kLoss, s[0].dtype(), {s[0], grad[0]}, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor d = Tensor::empty(c[0].shape(), dtype_v<T>, kern.device());  // ignored rows, padding: 0
      kern->vocab_parallel_backward(kern.stream, dtype_v<T>, rows, k, own, start, c[0].data<T>(),
                                    s[1].data<std::int64_t>(), ignore_index_, s[2].data<double>(), c[1].data<T>(),
                                    reduction_ == LossReduction::sum ? nullptr : count_.data<std::int64_t>(),
                                    d.data<T>());
      return d;
    });
    return {dlogits, Tensor()};
  }

  std::string name() const override { return kLoss; }

 private:
  // How many of this rank's k columns are real vocabulary (the rest, at the end, are padding).
  std::int64_t real_columns(std::int64_t k) const {
    return std::clamp(vocab_size_ - tp_->rank() * k, std::int64_t{0}, k);
  }

  comm::Group* tp_;
  std::int64_t vocab_size_;
  std::int64_t ignore_index_;
  LossReduction reduction_;
  Tensor count_;  // i64 scalar on the logits' device: the targets that are not ignored
};

}  // namespace

std::int64_t padded_vocab_size(std::int64_t vocab, int parts) {
  WF_CHECK(vocab > 0 && parts > 0, "padded_vocab_size: need a positive vocabulary and part count, got {} and {}",
           vocab, parts);
  return (vocab + parts - 1) / parts * parts;
}

VocabParallelEmbedding::VocabParallelEmbedding(const nn::EmbeddingOptions& options, comm::Group& tp,
                                               const TensorParallelOptions& tp_options)
    : nn::Embedding(options, vocab_rows(options, tp)), tp_(&tp), tp_options_(tp_options) {}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  const std::int64_t vocab = options().num_embeddings, start = vocab_start(), rows = weight().size(0);
  WF_CHECK(ids.defined() && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
           "VocabParallelEmbedding({}, {}): ids must be i64 or i32, got {}", vocab, options().dim,
           ids.defined() ? dtype_name(ids.dtype()) : "(undefined)");
  // The ids are replicated: each rank maps those it holds to its local rows and the others to
  // row 0 with a zero mask, so they add exactly zero to the output and to row 0's gradient.
  // Checked on every rank before the all-reduce, so all throw alike.
  const Tensor global = ids.to(DType::i64);
  const ops::Kernels k = ops::kernels_for("VocabParallelEmbedding", {global, weight()});
  Shape mask_shape = global.shape();
  mask_shape.push_back(1);
  Tensor local = Tensor::empty(global.shape(), DType::i64, k.device());
  Tensor mask = Tensor::empty(mask_shape, DType::f64, k.device());
  k->vocab_parallel_local_ids(k.stream, "VocabParallelEmbedding", global.numel(), vocab, start, rows,
                              global.data<std::int64_t>(), local.data<std::int64_t>(), mask.data<double>());
  // Cast before the sum: each token's row lives on one rank (the others add zeros), so the sum
  // is exact in the compute dtype, and the all-reduce moves that dtype like every activation.
  return reduce_from_tp(*tp_, in_compute_dtype(mul(embedding(local, weight()), mask.to(weight().dtype()))));
}

Tensor VocabParallelEmbedding::attend(const Tensor& h) {
  WF_CHECK(h.defined() && h.dim() >= 1 && h.size(-1) == options().dim,
           "VocabParallelEmbedding({}, {}): attend needs hidden states ending in {} features, got {}",
           options().num_embeddings, options().dim, options().dim, h.defined() ? shape_str(h.shape()) : "undefined");
  return linear(column_parallel_input(*tp_, h, tp_options_), weight());
}

namespace {

nn::ParameterShard vocab_head_rows(const nn::LinearOptions& options, comm::Group& tp) {
  WF_CHECK(options.in_features > 0 && options.out_features > 0 && !options.bias,
           "VocabParallelLinear: the vocabulary head needs positive sizes and no bias, got in={} out={} bias={}",
           options.in_features, options.out_features, options.bias);
  return nn::ParameterShard::split_padded(tp.name(),
                                          {padded_vocab_size(options.out_features, tp.size()), options.in_features}, 0,
                                          tp.size(), tp.rank(), options.out_features);
}

}  // namespace

VocabParallelLinear::VocabParallelLinear(const nn::LinearOptions& options, comm::Group& tp,
                                         const TensorParallelOptions& tp_options)
    : nn::Linear(options, vocab_head_rows(options, tp), nn::ParameterShard::replicated({options.out_features})),
      tp_(&tp),
      tp_options_(tp_options) {}

Tensor VocabParallelLinear::forward(const Tensor& x) {
  WF_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == options().in_features,
           "VocabParallelLinear(in={}, vocabulary {}): input of shape {} must end in {} features",
           options().in_features, options().out_features, x.defined() ? shape_str(x.shape()) : "undefined",
           options().in_features);
  return linear(column_parallel_input(*tp_, x, tp_options_), weight());
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets, comm::Group& tp,
                                    std::int64_t vocab_size, std::int64_t ignore_index, LossReduction reduction) {
  ops::check_floating(kLoss, logits_shard, "logits_shard");
  ops::check_min_dim(kLoss, logits_shard, 1, "logits_shard");
  ops::check_defined(kLoss, targets, "targets");
  ops::kernels_for(kLoss, {logits_shard, targets});  // one device
  WF_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
           "{}: targets have dtype {}, but class indices must be i64 (or i32)", kLoss, dtype_name(targets.dtype()));
  const std::int64_t padded = padded_vocab_size(vocab_size, tp.size());
  WF_CHECK(logits_shard.size(-1) * tp.size() == padded,
           "{}: logits_shard of shape {} must end in {} columns: a vocabulary of {} padded to {} over the {} ranks "
           "of group '{}'",
           kLoss, shape_str(logits_shard.shape()), padded / tp.size(), vocab_size, padded, tp.size(), tp.name());
  const Shape expected(logits_shard.shape().begin(), logits_shard.shape().end() - 1);
  WF_CHECK(targets.shape() == expected, "{}: targets of shape {} do not match logits_shard of shape {}; expected {}",
           kLoss, shape_str(targets.shape()), shape_str(logits_shard.shape()), shape_str(expected));
  return autograd::apply_function(std::make_shared<VocabParallelCrossEntropy>(tp, vocab_size, ignore_index, reduction),
                                  {logits_shard, targets.to(DType::i64)})[0];
}

}  // namespace wf::parallel
