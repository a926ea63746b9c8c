#include "wallfacer/nn/embedding.h"

#include <algorithm>

#include "wallfacer/nn/init.h"
#include "wallfacer/ops/embedding.h"
#include "wallfacer/ops/linalg.h"

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
  weight_ = register_parameter(
      "weight",
      normal_init_padded_rows(weight_shard, options.num_embeddings, derive_seed(seed(), "weight"), options.init_std),
      weight_shard);
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, std::uint64_t seed)
    : Embedding(EmbeddingOptions{.num_embeddings = num_embeddings, .dim = dim, .seed = seed}) {}

Tensor Embedding::forward(const Tensor& ids) {
  WF_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
           "Embedding({}, {}): ids must be i64 or i32, got {}", options_.num_embeddings, options_.dim,
           dtype_name(ids.dtype()));
  return in_compute_dtype(embedding(ids, weight_));  // cast the rows looked up, not the table
}

Tensor Embedding::attend(const Tensor& h) {
  WF_CHECK(h.defined() && h.dim() >= 1 && h.size(-1) == options_.dim,
           "Embedding({}, {}): attend needs hidden states ending in {} features, got {}", options_.num_embeddings,
           options_.dim, options_.dim, h.defined() ? shape_str(h.shape()) : "undefined");
  return linear(h, weight_);  // bf16 h against the f32 master under mixed precision (ops/linalg.h)
}

}  // namespace wf::nn
