#include "wallfacer/nn/embedding.h"

#include <algorithm>

#include "wallfacer/nn/init.h"
#include "wallfacer/ops/embedding.h"

namespace wf::nn {

Embedding::Embedding(const EmbeddingOptions& options)
    : Embedding(options, ParameterShard::replicated({options.num_embeddings, options.dim})) {}

Embedding::Embedding(const EmbeddingOptions& options, const ParameterShard& weight_shard)
    : Module(options.seed), options_(options) {
  WF_CHECK(options.num_embeddings > 0 && options.dim > 0,
           "Embedding: num_embeddings and dim must be positive, got {} and {}", options.num_embeddings,
           options.dim);
  const Shape& global = weight_shard.global_shape;
  WF_CHECK(global.size() == 2 && global[0] >= options.num_embeddings && global[1] == options.dim &&
               (weight_shard.dim == -1 || weight_shard.dim == 0),
           "Embedding({}, {}): the weight shard ({}) must describe [rows >= {}, {}], whole or split by rows",
           options.num_embeddings, options.dim, shard_str(weight_shard), options.num_embeddings, options.dim);
  // Element k of the table is stream element k whatever the row count, so the padded table's
  // real rows are the whole table's bit for bit; only the padding is overwritten.
  Tensor w = normal_init_shard(weight_shard, derive_seed(seed(), "weight"), options.init_std);
  const std::int64_t first_pad = std::clamp(options.num_embeddings - weight_shard.start(), std::int64_t{0}, w.size(0));
  std::fill(w.data<float>() + first_pad * options.dim, w.data<float>() + w.numel(), 0.0f);
  weight_ = register_parameter("weight", std::move(w), weight_shard);
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, std::uint64_t seed)
    : Embedding(EmbeddingOptions{.num_embeddings = num_embeddings, .dim = dim, .seed = seed}) {}

Tensor Embedding::forward(const Tensor& ids) {
  WF_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
           "Embedding({}, {}): ids must be i64 or i32, got {}", options_.num_embeddings, options_.dim,
           dtype_name(ids.dtype()));
  return embedding(ids, weight_);
}

}  // namespace wf::nn
