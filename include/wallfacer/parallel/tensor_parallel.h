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
// Activation sharding (TensorParallelOptions::shard_activations; Megatron's "sequence
// parallelism", Korthikanti et al. 2022). Outside the split regions the residual stream, its
// norms and its dropouts are otherwise computed alike on every tp rank; with this option each
// rank holds only its slice of the tokens (dim -2 of [B, T, d], tokens [r·T/tp, (r+1)·T/tp) of
// the T this rank has — under sequence parallelism those are already this sp rank's shard).
// The two ends of a split region change, at the same traffic (an all-reduce is a reduce-scatter
// plus an all-gather):
//   column_parallel_input  all-gather the tokens; backward reduce-scatter (each rank's column
//                          layer gives a partial gradient of the gathered input) = all_gather_dim
//   row_parallel_output    reduce-scatter the tokens; backward all-gather = reduce_scatter_dim
// and a replicated tensor enters the sharded stream through shard_tokens (keep this rank's
// tokens; backward all-gather = scatter_dim), which the model calls after the embedding through
// LayerFactory::shard_activations. A parameter applied to this rank's tokens only (a norm, a
// row layer's bias) gets a partial gradient: its ParameterShard says partial_gradient_group =
// tp, and reduce_partial_gradients sums them before the optimizer (Megatron all-reduces the
// parameters it marks sequence_parallel).
//
// Dropout (LayerFactory::dropout). The default generator is seeded alike on the ranks of a tp
// group, so a dropout on a replicated activation draws the same mask everywhere with nothing
// done; on a token-sharded one each rank draws its slice of that mask (dropout_slice), i.e. the
// single-process mask. A dropout on an activation split over tp (inside a column → row region)
// draws from the tracker's tensor-parallel stream (seed_tensor_parallel_rng), seeded per tp
// rank, so the ranks' different elements get independent masks (Megatron's
// get_cuda_rng_tracker().fork()).
//
// Initialisation: each rank's weight is bit for bit its slice of the whole layer's weight drawn
// with the same seed (nn::init_shard), and each parameter says which slice it is
// (Module::parameter_shard). A model built with TensorParallelLayers over tp ranks therefore
// starts from exactly the single-process model, cut up.
//
// The group is held by reference in the layers and the autograd graph: it must outlive both.
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/parallel/collectives.h"

namespace wf::parallel {

inline Tensor copy_to_tp(comm::Group& tp, const Tensor& x) { return copy_to_group(tp, x); }
inline Tensor reduce_from_tp(comm::Group& tp, const Tensor& x) { return all_reduce(tp, x); }
inline Tensor scatter_to_tp(comm::Group& tp, const Tensor& x) { return scatter_last_dim(tp, x); }
inline Tensor gather_from_tp(comm::Group& tp, const Tensor& x) { return gather_last_dim(tp, x); }

struct TensorParallelOptions {
  // Split the residual stream's tokens over tp (see above); false: keep it replicated.
  bool shard_activations = false;
};

// The token dim of an activation [..., T, features] (dim 1 of [B, T, d]).
inline constexpr std::int64_t kTokenDim = -2;

// The two ends of a split region, shared by every tensor-parallel layer (the linears, the
// vocabulary head, the tied head through VocabParallelEmbedding::attend):
//   column_parallel_input: the input enters the region. Replicated: copy_to_tp (identity, the
//     backward sums the ranks' partial input gradients). Sharded: all-gather of the tokens
//     (the backward reduce-scatters them).
//   row_parallel_output:   the ranks' partial outputs leave it summed: reduce_from_tp, or
//     sharded a reduce-scatter over the tokens (backward all-gather).
// Sharded, the tokens must divide over tp: wf::Error naming the sizes otherwise.
Tensor column_parallel_input(comm::Group& tp, const Tensor& x, const TensorParallelOptions& options = {});
Tensor row_parallel_output(comm::Group& tp, const Tensor& partial, const TensorParallelOptions& options = {});
// A replicated activation [..., T, d] enters the token-sharded stream: this rank's tokens
// [r·T/tp, (r+1)·T/tp); backward all-gathers the gradient (scatter_dim of kTokenDim).
Tensor shard_tokens(comm::Group& tp, const Tensor& x);

// y = x · Wᵀ + b with W's rows (output features) split over `tp`: this rank holds
// weight [out/tp, in] and bias [out/tp], rows [r·out/tp, (r+1)·out/tp) of the whole layer's.
// x [..., in] is replicated; the output is this rank's [..., out/tp] slice, or the whole
// [..., out] (replicated) with gather_output.
class ColumnParallelLinear : public nn::Linear {
 public:
  ColumnParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool gather_output = false,
                       const TensorParallelOptions& tp_options = {});
  Tensor forward(const Tensor& x) override;
  // gelu(forward(x)) with the GELU fused into this rank's product (ops::linear_gelu): elementwise,
  // so applying it before the output's gather is the same.
  Tensor forward_gelu(const Tensor& x) override;
  comm::Group& group() const { return *tp_; }
  bool gather_output() const { return gather_output_; }

 private:
  Tensor project(const Tensor& x, bool gelu);  // forward (gelu false) or forward_gelu

  comm::Group* tp_;
  bool gather_output_;
  TensorParallelOptions tp_options_;
};

// y = x · Wᵀ + b with W's columns (input features) split over `tp`: this rank holds
// weight [out, in/tp], columns [r·in/tp, (r+1)·in/tp) of the whole layer's, and the whole
// bias [out] (replicated: it is added once, after the partial products are summed). x is this
// rank's [..., in/tp] slice (input_is_parallel, what a ColumnParallelLinear without
// gather_output gives) or the whole replicated [..., in], which is sliced first. The output
// [..., out] is replicated.
// With tp_options.shard_activations (column side: the input is this rank's tokens, gathered;
// row side: the output is this rank's tokens): x of ColumnParallelLinear is [..., T/tp, in]
// and its output [..., T, out/tp]; RowParallelLinear takes [..., T, in/tp] (input_is_parallel
// only) and gives [..., T/tp, out], its bias (added to this rank's tokens) marked with a
// gradient partial over tp.
class RowParallelLinear : public nn::Linear {
 public:
  RowParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool input_is_parallel = true,
                    const TensorParallelOptions& tp_options = {});
  Tensor forward(const Tensor& x) override;
  comm::Group& group() const { return *tp_; }
  bool input_is_parallel() const { return input_is_parallel_; }

 private:
  comm::Group* tp_;
  bool input_is_parallel_;
  TensorParallelOptions tp_options_;
};

// Dropout on this rank's token slice of an activation that is otherwise whole (the residual
// stream with activation sharding): draws its slice of the mask the whole activation's dropout
// draws from the default generator, which ends where that one's would (dropout_slice).
class TokenShardedDropout : public nn::Dropout {
 public:
  TokenShardedDropout(double p, comm::Group& tp) : nn::Dropout(p), tp_(&tp) {}

 protected:
  Tensor drop(const Tensor& x) const override;

 private:
  comm::Group* tp_;
};

// The tracker's stream for dropout on activations split over tp.
inline constexpr const char* kTensorParallelRng = "tensor-parallel";
// The seed of that stream on tp rank `tp_rank` for a run seeded `base_seed`: a different
// stream per tp rank (and none of them the default generator's).
std::uint64_t tensor_parallel_seed(std::uint64_t base_seed, int tp_rank);
// (Re)starts generator_tracker()'s kTensorParallelRng stream at tensor_parallel_seed(base_seed,
// tp.rank()), offset 0. Call it once at start-up, like the default generator's seed; a resumed
// run restores generator_tracker().states() from its checkpoint instead.
void seed_tensor_parallel_rng(std::uint64_t base_seed, const comm::Group& tp);

// Dropout on an activation split over tp (inside a column → row region: the MLP hidden, the
// attention probabilities): draws from the kTensorParallelRng stream (ForkedGenerator), so each
// tp rank's elements get their own mask. wf::Error when the stream was not seeded.
class SplitRegionDropout : public nn::Dropout {
 public:
  using nn::Dropout::Dropout;

 protected:
  Tensor drop(const Tensor& x) const override;
};

// The layer factory of a tensor-parallel model: linear() gives a ColumnParallelLinear (output
// left split) for LinearRole::column, a RowParallelLinear taking the split input for
// LinearRole::row, a VocabParallelLinear for LinearRole::vocabulary, and the plain Linear for
// LinearRole::replicated. embedding() gives a VocabParallelEmbedding (vocab_parallel.h) for
// EmbeddingRole::vocabulary and the plain Embedding otherwise (positions); norms are the plain
// ones, a norm over split heads (ActivationRegion::split) with its gradient marked partial over
// tp. The vocabulary layers' logits stay split: vocabulary_loss_sum is vocab_parallel_cross_entropy,
// vocabulary_logits gathers them and drops the padding.
// dropout(p, ActivationRegion::split) is a SplitRegionDropout; in the replicated region the
// plain Dropout, or with shard_activations a TokenShardedDropout.
// With options.shard_activations every layer it builds honours it (above), shard_activations()
// is shard_tokens, and the norms and replicated linears, which see this rank's tokens only,
// have their gradients marked partial over tp.
class TensorParallelLayers : public nn::LayerFactory {
 public:
  explicit TensorParallelLayers(comm::Group& tp, const TensorParallelOptions& options = {})
      : tp_(&tp), options_(options) {}
  std::shared_ptr<nn::Linear> linear(const nn::LinearOptions& options, nn::LinearRole role) const override;
  std::shared_ptr<nn::Embedding> embedding(const nn::EmbeddingOptions& options, nn::EmbeddingRole role) const override;
  std::shared_ptr<nn::Normalization> norm(
      nn::NormType type, std::int64_t dim, double eps,
      nn::ActivationRegion region = nn::ActivationRegion::replicated) const override;
  std::shared_ptr<nn::Dropout> dropout(double p, nn::ActivationRegion region) const override;
  Tensor shard_activations(const Tensor& x) const override;
  int tensor_parallel_size() const override { return tp_->size(); }
  int activation_token_parts() const override { return options_.shard_activations ? tp_->size() : 1; }
  Tensor vocabulary_loss_sum(const Tensor& logits, const Tensor& targets, std::int64_t vocab_size) const override;
  Tensor vocabulary_logits(const Tensor& logits, std::int64_t vocab_size) const override;
  // The head's split logits (its layers' forwards hold the collectives) into vocabulary_loss_sum.
  Tensor head_loss_sum(const Tensor& h, const nn::VocabularyHead& head, const Tensor& targets,
                       std::int64_t vocab_size) const override;
  comm::Group& group() const { return *tp_; }
  const TensorParallelOptions& options() const { return options_; }

 private:
  comm::Group* tp_;
  TensorParallelOptions options_;
};

// Sums over `tp` the gradient of every parameter whose shard says partial_gradient_group ==
// tp.name() (in place; the others are left alone), so that afterwards each holds the whole
// model's gradient, as a single process would. Call it after backward and before clipping and
// the optimizer, on every tp rank alike (it is collective). `params` and `shards` in the same
// order (Module::parameters() / named_parameter_shards()); a parameter with no gradient yet
// gets zeros first, so every rank takes part in every reduction. Returns how many were summed.
// One all-reduce per dtype: the gradients travel packed in one buffer.
int reduce_partial_gradients(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                             comm::Group& tp);
int reduce_partial_gradients(const nn::Module& module, comm::Group& tp);

}  // namespace wf::parallel
