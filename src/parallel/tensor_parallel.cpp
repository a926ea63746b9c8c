// Column- and row-parallel linear layers and their factory (tensor_parallel.h).
#include "wallfacer/parallel/tensor_parallel.h"

#include <map>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/nn/init.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/parallel/vocab_parallel.h"

namespace wf::parallel {
namespace {

// Slice tp.rank() of tp.size() along `dim` of a whole `shape`, after checking (with the
// layer's name in the message) that `features` divide over the group.
nn::ParameterShard tp_slice(const char* layer, const char* what, std::int64_t features, comm::Group& tp,
                            const Shape& shape, int dim) {
  WF_CHECK(features > 0 && features % tp.size() == 0,
           "{}: {} = {} does not split into {} equal slices over group '{}'", layer, what, features, tp.size(),
           tp.name());
  return nn::ParameterShard::split(tp.name(), shape, dim, tp.size(), tp.rank());
}

void check_input(const char* layer, const Tensor& x, std::int64_t expected, const char* which) {
  WF_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == expected, "{}: input of shape {} must end in {} features ({})",
           layer, x.defined() ? shape_str(x.shape()) : std::string("(undefined)"), expected, which);
}

// With activation sharding x's tokens are split over tp: checked here, on every rank alike and
// before any traffic, with the sizes in the message (the collectives' own check names dims).
void check_token_split(const char* where, comm::Group& tp, const Tensor& x) {
  WF_CHECK(x.defined() && x.dim() >= 2, "{}: activation sharding splits the tokens (dim -2) of [..., tokens, features], "
           "got {}", where, x.defined() ? shape_str(x.shape()) : std::string("(undefined)"));
  WF_CHECK(x.size(kTokenDim) % tp.size() == 0,
           "{}: activation sharding splits the {} tokens of {} over the {} ranks of tp group '{}', which does not "
           "divide; the tokens per rank (the sequence length over sp) must be a multiple of tp",
           where, x.size(kTokenDim), shape_str(x.shape()), tp.size(), tp.name());
}

// A row layer's bias is added to the layer's output, which with activation sharding is this
// rank's tokens only: its gradient is then partial over tp.
nn::ParameterShard row_bias(const nn::LinearOptions& options, comm::Group& tp, const TensorParallelOptions& o) {
  nn::ParameterShard shard = nn::ParameterShard::replicated({options.out_features});
  if (o.shard_activations) shard.partial_gradient_group = tp.name();
  return shard;
}

}  // namespace

Tensor column_parallel_input(comm::Group& tp, const Tensor& x, const TensorParallelOptions& options) {
  if (!options.shard_activations) return copy_to_tp(tp, x);
  WF_CHECK(x.defined() && x.dim() >= 2, "column_parallel_input: activation sharding gathers the tokens (dim -2) of "
           "[..., tokens, features], got {}", x.defined() ? shape_str(x.shape()) : std::string("(undefined)"));
  return all_gather_dim(tp, x, kTokenDim);
}

Tensor row_parallel_output(comm::Group& tp, const Tensor& partial, const TensorParallelOptions& options) {
  if (!options.shard_activations) return reduce_from_tp(tp, partial);
  check_token_split("row_parallel_output", tp, partial);
  return reduce_scatter_dim(tp, partial, kTokenDim);
}

Tensor shard_tokens(comm::Group& tp, const Tensor& x) {
  check_token_split("shard_tokens", tp, x);
  return scatter_dim(tp, x, kTokenDim);
}

ColumnParallelLinear::ColumnParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool gather_output,
                                           const TensorParallelOptions& tp_options)
    : nn::Linear(options,
                 tp_slice("ColumnParallelLinear", "out_features", options.out_features, tp,
                          {options.out_features, options.in_features}, 0),
                 tp_slice("ColumnParallelLinear", "out_features", options.out_features, tp, {options.out_features}, 0)),
      tp_(&tp),
      gather_output_(gather_output),
      tp_options_(tp_options) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) { return project(x, false); }

Tensor ColumnParallelLinear::forward_gelu(const Tensor& x) { return project(x, true); }

Tensor ColumnParallelLinear::project(const Tensor& x, bool gelu) {
  check_input("ColumnParallelLinear", x, options().in_features,
              tp_options_.shard_activations ? "this rank's tokens, all features" : "the whole input, replicated over the group");
  // Every rank uses the whole input: its gradient is the sum of the ranks'.
  const Tensor input = column_parallel_input(*tp_, x, tp_options_);
  const Tensor y = gelu ? linear_gelu(input, weight(), bias()) : linear(input, weight(), bias());
  return gather_output_ ? gather_from_tp(*tp_, y) : y;
}

RowParallelLinear::RowParallelLinear(const nn::LinearOptions& options, comm::Group& tp, bool input_is_parallel,
                                     const TensorParallelOptions& tp_options)
    : nn::Linear(options,
                 tp_slice("RowParallelLinear", "in_features", options.in_features, tp,
                          {options.out_features, options.in_features}, 1),
                 row_bias(options, tp, tp_options)),
      tp_(&tp),
      input_is_parallel_(input_is_parallel),
      tp_options_(tp_options) {
  // A whole input would be this rank's tokens only: no rank could form the split input.
  WF_CHECK(input_is_parallel || !tp_options.shard_activations,
           "RowParallelLinear: with activation sharding the input must be the column layer's split output "
           "(input_is_parallel)");
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const std::int64_t in = options().in_features;
  if (input_is_parallel_) {
    check_input("RowParallelLinear", x, in / tp_->size(), "this rank's slice of the input features");
  } else {
    check_input("RowParallelLinear", x, in, "the whole input, replicated over the group");
  }
  const Tensor own = input_is_parallel_ ? x : scatter_to_tp(*tp_, x);
  // The bias joins after the sum, so it is counted once rather than once per rank.
  const Tensor y = row_parallel_output(*tp_, linear(own, weight()), tp_options_);
  return bias().defined() ? add(y, in_compute_dtype(bias())) : y;
}

Tensor TokenShardedDropout::drop(const Tensor& x) const {
  return dropout_slice(x, p(), /*training=*/true, kTokenDim, tp_->size(), tp_->rank());
}

std::uint64_t tensor_parallel_seed(std::uint64_t base_seed, int tp_rank) {
  return nn::derive_seed(nn::derive_seed(base_seed, kTensorParallelRng), std::to_string(tp_rank));
}

void seed_tensor_parallel_rng(std::uint64_t base_seed, const comm::Group& tp) {
  generator_tracker().seed(kTensorParallelRng, tensor_parallel_seed(base_seed, tp.rank()));
}

Tensor SplitRegionDropout::drop(const Tensor& x) const {
  WF_CHECK(generator_tracker().contains(kTensorParallelRng),
           "SplitRegionDropout: the '{}' random stream is not seeded; call parallel::seed_tensor_parallel_rng at "
           "start-up (or restore the tracker's states from a checkpoint)",
           kTensorParallelRng);
  const ForkedGenerator stream(kTensorParallelRng);
  return nn::Dropout::drop(x);
}

std::shared_ptr<nn::Linear> TensorParallelLayers::linear(const nn::LinearOptions& options,
                                                         nn::LinearRole role) const {
  switch (role) {
    case nn::LinearRole::column: return std::make_shared<ColumnParallelLinear>(options, *tp_, false, options_);
    case nn::LinearRole::row: return std::make_shared<RowParallelLinear>(options, *tp_, true, options_);
    case nn::LinearRole::vocabulary: return std::make_shared<VocabParallelLinear>(options, *tp_, options_);
    case nn::LinearRole::replicated: break;
  }
  auto whole = std::make_shared<nn::Linear>(options);
  // Outside the split regions, so on this rank's tokens when they are sharded.
  if (options_.shard_activations) whole->set_gradient_partial_over(tp_->name());
  return whole;
}

std::shared_ptr<nn::Embedding> TensorParallelLayers::embedding(const nn::EmbeddingOptions& options,
                                                               nn::EmbeddingRole role) const {
  if (role == nn::EmbeddingRole::vocabulary) return std::make_shared<VocabParallelEmbedding>(options, *tp_, options_);
  // Other tables (positions) are looked up before shard_activations, for every token: whole.
  return std::make_shared<nn::Embedding>(options);
}

std::shared_ptr<nn::Normalization> TensorParallelLayers::norm(nn::NormType type, std::int64_t dim, double eps,
                                                              nn::ActivationRegion region) const {
  auto norm = nn::LayerFactory::norm(type, dim, eps, region);
  // Over this rank's heads (split), or over this rank's tokens (sharded activations): either way
  // its gradient is this rank's part of the whole.
  if (region == nn::ActivationRegion::split || options_.shard_activations) norm->set_gradient_partial_over(tp_->name());
  return norm;
}

std::shared_ptr<nn::Dropout> TensorParallelLayers::dropout(double p, nn::ActivationRegion region) const {
  switch (region) {
    case nn::ActivationRegion::split: return std::make_shared<SplitRegionDropout>(p);
    case nn::ActivationRegion::replicated: break;
  }
  if (options_.shard_activations) return std::make_shared<TokenShardedDropout>(p, *tp_);
  return nn::LayerFactory::dropout(p, region);
}

Tensor TensorParallelLayers::shard_activations(const Tensor& x) const {
  return options_.shard_activations ? shard_tokens(*tp_, x) : x;
}

Tensor TensorParallelLayers::vocabulary_loss_sum(const Tensor& logits, const Tensor& targets,
                                                 std::int64_t vocab_size) const {
  return vocab_parallel_cross_entropy(logits, targets, *tp_, vocab_size, /*ignore_index=*/-100, LossReduction::sum);
}

Tensor TensorParallelLayers::head_loss_sum(const Tensor& h, const nn::VocabularyHead& head, const Tensor& targets,
                                           std::int64_t vocab_size) const {
  return vocabulary_loss_sum(head.logits(h), targets, vocab_size);
}

Tensor TensorParallelLayers::vocabulary_logits(const Tensor& logits, std::int64_t vocab_size) const {
  const Tensor whole = gather_from_tp(*tp_, logits);  // [..., V_pad]
  return whole.size(-1) == vocab_size ? whole : narrow(whole, whole.dim() - 1, 0, vocab_size);
}

int reduce_partial_gradients(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                             comm::Group& tp) {
  WF_CHECK(params.size() == shards.size(), "reduce_partial_gradients: {} parameters but {} shards", params.size(),
           shards.size());
  // The partial gradients, by dtype: each dtype's travel packed in one all-reduce.
  std::map<DType, std::vector<Tensor>> partial;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (shards[i].partial_gradient_group != tp.name()) continue;
    Tensor param = params[i];
    if (!param.grad().defined()) param.set_grad(Tensor::zeros(param.shape(), param.dtype()));
    partial[param.dtype()].push_back(param);  // (a gradient may be a view of a flat buffer: written in place below)
  }
  int count = 0;
  for (auto& [dtype, group] : partial) {
    std::vector<Tensor> flat;
    for (const Tensor& param : group) flat.push_back(reshape(param.grad(), {param.numel()}));
    Tensor packed = cat(flat, 0);
    tp.all_reduce(packed, comm::ReduceOp::sum);
    std::int64_t at = 0;
    for (Tensor& param : group) {
      Tensor grad = param.grad();
      grad.copy_(reshape(narrow(packed, 0, at, param.numel()), param.shape()));
      at += param.numel();
      ++count;
    }
  }
  return count;
}

int reduce_partial_gradients(const nn::Module& module, comm::Group& tp) {
  return reduce_partial_gradients(module.parameters(), module.parameter_shards(), tp);
}

}  // namespace wf::parallel
