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
  // A tied output head: h [..., dim] → logits h · weightᵀ [..., num_embeddings] against the
  // table. A vocab-parallel table gives this rank's vocabulary columns of the (padded) logits,
  // which LayerFactory::vocabulary_loss_sum and vocabulary_logits read.
  virtual Tensor attend(const Tensor& h);

  const Tensor& weight() const { return weight_; }
  // The whole table's options: with vocabulary parallelism, weight() is this rank's rows of it.
  const EmbeddingOptions& options() const { return options_; }

 protected:
  // For the vocabulary-parallel subclass (parallel/vocab_parallel.h): `options` describe the
  // whole table and this rank holds the rows of weight that `weight_shard` says. The shard's
  // global shape may have more rows than num_embeddings (a vocabulary padded to split evenly):
  // the real rows are drawn as exactly those rows of the whole table's initial weight
  // (init_shard), the padded ones (index >= num_embeddings) are zeros.
  Embedding(const EmbeddingOptions& options, const ParameterShard& weight_shard);

 private:
  EmbeddingOptions options_;
  Tensor weight_;
};

}  // namespace wf::nn
