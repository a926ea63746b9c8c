#pragma once
// Embedding: a lookup table weight [num_embeddings, dim], initialised normal(0, init_std²).
#include <cstdint>

#include "wallfacer/nn/module.h"

namespace wf::nn {

struct EmbeddingOptions {
  std::int64_t num_embeddings = 0;
  std::int64_t dim = 0;
  double init_std = 0.02;
  std::uint64_t seed = 0;
};

class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options);
  Embedding(std::int64_t num_embeddings, std::int64_t dim, std::uint64_t seed = 0);

  // ids [...] (i64 or i32, each in [0, num_embeddings)) → [..., dim]
  // Virtual: a vocab-parallel table (LayerFactory) overrides it.
  virtual Tensor forward(const Tensor& ids);

  const Tensor& weight() const { return weight_; }
  const EmbeddingOptions& options() const { return options_; }

 private:
  EmbeddingOptions options_;
  Tensor weight_;
};

}  // namespace wf::nn
