#pragma once
// Megatron-style tensor parallelism (Shoeybi et al. 2019): the pieces.
//
// A transformer block's two weight-heavy sublayers are each a column-parallel linear followed by
// a row-parallel one (attention: qkv then proj; MLP: fc then proj). The column layer splits its
// output features over the tp group, so every rank computes a slice of the hidden activation
// from the whole (replicated) input; the elementwise work in between stays on the slice; the
// row layer splits its input features, so each rank multiplies its slice by its columns of the
// weight and one all-reduce sums the partial outputs back into the replicated residual stream.
// Per sublayer: one all-reduce forward (reduce_from_tp) and one backward (copy_to_tp).
//
// The mappings between replicated and split tensors (gradient convention: collectives.h):
//   copy_to_tp      identity; backward all-reduce        (Megatron's f)  = parallel::copy_to_group
//   reduce_from_tp  all-reduce; backward identity        (Megatron's g)  = parallel::all_reduce
//   scatter_to_tp   keep this rank's last-dim slice; backward all-gather = parallel::scatter_last_dim
//   gather_from_tp  all-gather the last dim; backward keep the slice     = parallel::gather_last_dim
//
// Initialisation: each rank's weight is bit for bit its slice of the whole layer's weight drawn
// with the same seed (nn::normal_init_shard), and each parameter says which slice it is
// (Module::parameter_shard). A model built with TensorParallelLayers over tp ranks therefore
// starts from exactly the single-process model, cut up.
//
// The group is held by reference in the layers and the autograd graph: it must outlive both.
#include <memory>

#include "wallfacer/comm/group.h"
#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/parallel/collectives.h"

namespace wf::parallel {

inline Tensor copy_to_tp(comm::Group& tp, const Tensor& x) { return copy_to_group(tp, x); }
inline Tensor reduce_from_tp(comm::Group& tp, const Tensor& x) { return all_reduce(tp, x); }
inline Tensor scatter_to_tp(comm::Group& tp, const Tensor& x) { return scatter_last_dim(tp, x); }
inline Tensor gather_from_tp(comm::Group& tp, const Tensor& x) { return gather_last_dim(tp, x); }

// The two ends of a split region, shared by every tensor-parallel layer (the linears, the
// vocabulary head, the tied head through VocabParallelEmbedding::attend):
//   column_parallel_input: the replicated input enters the region (copy_to_tp: identity, the
//     backward sums the ranks' partial input gradients);
//   row_parallel_output:   the ranks' partial outputs leave it summed (reduce_from_tp).
Tensor column_parallel_input(comm::Group& tp, const Tensor& x);
Tensor row_parallel_output(comm::Group& tp, const Tensor& partial);

// y = x · Wᵀ + b with W's rows (output features) split over `tp`: this rank holds
// weight [out/tp, in] and bias [out/tp], rows [r·out/tp, (r+1)·out/tp) of the whole layer's.
// x [..., in] is replicated; the output is this rank's [..., out/tp] slice, or the whole
// [..., out] (replicated) with gather_output.
class ColumnParallelLinear : public nn::Linear {
 public:
  ColumnParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool gather_output = false);
  Tensor forward(const Tensor& x) override;
  comm::Group& group() const { return *tp_; }
  bool gather_output() const { return gather_output_; }

 private:
  comm::Group* tp_;
  bool gather_output_;
};

// y = x · Wᵀ + b with W's columns (input features) split over `tp`: this rank holds
// weight [out, in/tp], columns [r·in/tp, (r+1)·in/tp) of the whole layer's, and the whole
// bias [out] (replicated: it is added once, after the partial products are summed). x is this
// rank's [..., in/tp] slice (input_is_parallel, what a ColumnParallelLinear without
// gather_output gives) or the whole replicated [..., in], which is sliced first. The output
// [..., out] is replicated.
class RowParallelLinear : public nn::Linear {
 public:
  RowParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool input_is_parallel = true);
  Tensor forward(const Tensor& x) override;
  comm::Group& group() const { return *tp_; }
  bool input_is_parallel() const { return input_is_parallel_; }

 private:
  comm::Group* tp_;
  bool input_is_parallel_;
};

// The layer factory of a tensor-parallel model: linear() gives a ColumnParallelLinear (output
// left split) for LinearRole::column, a RowParallelLinear taking the split input for
// LinearRole::row, a VocabParallelLinear for LinearRole::vocabulary, and the plain Linear for
// LinearRole::replicated. embedding() gives a VocabParallelEmbedding (vocab_parallel.h) for
// EmbeddingRole::vocabulary and the plain Embedding otherwise (positions); norms are the plain
// (replicated) ones. The vocabulary layers' logits stay split: vocabulary_loss_sum is
// vocab_parallel_cross_entropy, vocabulary_logits gathers them and drops the padding.
class TensorParallelLayers : public nn::LayerFactory {
 public:
  explicit TensorParallelLayers(comm::Group& tp) : tp_(&tp) {}
  std::shared_ptr<nn::Linear> linear(const nn::LinearOptions& options, nn::LinearRole role) const override;
  std::shared_ptr<nn::Embedding> embedding(const nn::EmbeddingOptions& options, nn::EmbeddingRole role) const override;
  int tensor_parallel_size() const override { return tp_->size(); }
  Tensor vocabulary_loss_sum(const Tensor& logits, const Tensor& targets, std::int64_t vocab_size) const override;
  Tensor vocabulary_logits(const Tensor& logits, std::int64_t vocab_size) const override;
  comm::Group& group() const { return *tp_; }

 private:
  comm::Group* tp_;
};

}  // namespace wf::parallel
