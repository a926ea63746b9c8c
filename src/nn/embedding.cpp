#include "wallfacer/nn/embedding.h"

#include "wallfacer/ops/embedding.h"

namespace wf::nn {

Embedding::Embedding(const EmbeddingOptions& options) : Module(options.seed), options_(options) {
  WF_CHECK(options.num_embeddings > 0 && options.dim > 0,
           "Embedding: num_embeddings and dim must be positive, got {} and {}", options.num_embeddings,
           options.dim);
  weight_ = register_parameter("weight", init_normal("weight", {options.num_embeddings, options.dim}, options.init_std));
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
