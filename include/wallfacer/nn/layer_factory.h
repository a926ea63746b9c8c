#pragma once
// LayerFactory: the one place blocks and models get their weight-holding layers from (linear,
// embedding, normalisation). The default factory builds the plain single-process layers. A
// tensor-parallel build swaps in a factory whose linear() returns column- or row-parallel
// layers by role and whose embedding() is vocab-parallel, and every model built from the nn
// blocks (GPT, LLaMA, a user's) gets them without parallel code in the model file — the role
// each call site passes is the sharding knowledge (Megatron's ColumnParallelLinear /
// RowParallelLinear choice), stated once where the layer is built.
#include <cstdint>
#include <functional>
#include <memory>

#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/embedding.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/nn/norm.h"

namespace wf::nn {

// How a linear layer sits in a block, which is what tensor parallelism needs to split it:
//  - column: its output features may be split (qkv, the MLP's fc, SwiGLU's gate and up); the
//    input is the full residual stream, the output stays split for the next layer;
//  - row: its input features may be split (the attention's and the MLP's output projection);
//    its partial outputs are summed into the residual stream;
//  - replicated: never split (small layers, heads outside the parallel regions);
//  - vocabulary: the output head onto the token vocabulary (out_features = the vocabulary,
//    no bias). tp splits its rows like the vocabulary embedding's (padded to split evenly) and
//    its logits stay split: read them with vocabulary_loss_sum / vocabulary_logits.
enum class LinearRole { column, row, replicated, vocabulary };
const char* linear_role_name(LinearRole role);

// Whether an embedding is the token vocabulary (tp splits its rows) or another table.
enum class EmbeddingRole { vocabulary, replicated };

// Where a dropout or a norm acts, which decides what tensor parallelism does with it:
//  - replicated: on the residual stream (after a row layer's output, after the embedding),
//    which every tp rank holds alike (or, with activation sharding, its slice of the tokens):
//    a dropout draws the single-process mask on all ranks (or their slice of it); a norm's
//    weight is whole, its gradient partial over tp only under activation sharding;
//  - split: inside a column → row region (the MLP hidden, attention probabilities, the heads),
//    where each tp rank holds different features: a dropout draws each rank's own mask, from a
//    per-rank stream; a norm over split heads (QK-norm: one weight of head_dim applied to every
//    head) is whole on every rank, but each rank's gradient covers only its heads, so it is
//    marked partial over tp and summed before the optimizer (reduce_partial_gradients).
//    Declared `replicated`, such a weight would drift apart on the tp ranks (train.check_replicas
//    catches it).
enum class ActivationRegion { replicated, split };

// An output head onto the token vocabulary as head_loss_sum reads it: its weight [vocab, d] — a
// LinearRole::vocabulary linear's (bias-free) or the tied EmbeddingRole::vocabulary table — for the
// fused loss, and the module's own logits of h in the weight's dtype (the masters'), as
// vocabulary_loss_sum reads them, for a factory whose layers compute more than h·weightᵀ (tensor
// parallelism: collectives in their forwards, a padded split vocabulary).
struct VocabularyHead {
  Tensor weight;
  std::function<Tensor(const Tensor&)> logits;
  std::int64_t chunk_rows = 0;  // rows per chunk of the fused loss; 0: linear_cross_entropy_chunk_rows (ops/loss.h)
};

class LayerFactory {
 public:
  virtual ~LayerFactory();
  virtual std::shared_ptr<Linear> linear(const LinearOptions& options, LinearRole role) const;
  virtual std::shared_ptr<Embedding> embedding(const EmbeddingOptions& options, EmbeddingRole role) const;
  // A norm over the last `dim` features of activations in `region` (the residual stream by default).
  virtual std::shared_ptr<Normalization> norm(NormType type, std::int64_t dim, double eps,
                                              ActivationRegion region = ActivationRegion::replicated) const;
  // A dropout of probability p acting in `region` (the plain Dropout here).
  virtual std::shared_ptr<Dropout> dropout(double p, ActivationRegion region) const;

  // The residual stream after the embedding, as the blocks take it: the identity here; a
  // tensor-parallel factory with activation sharding keeps this rank's slice of the tokens.
  virtual Tensor shard_activations(const Tensor& x) const { return x; }
  // The ways the blocks' inputs are split along the tokens (dim -2) by shard_activations: a
  // block seeing T tokens of x attends over activation_token_parts() · T of them.
  virtual int activation_token_parts() const { return 1; }

  // The ways this factory splits attention heads and feed-forward features (tp; 1: whole).
  virtual int tensor_parallel_size() const { return 1; }

  // Logits of a vocabulary layer (a LinearRole::vocabulary linear, or Embedding::attend of an
  // EmbeddingRole::vocabulary table), which a tensor-parallel factory leaves split over the
  // vocabulary: the cross-entropy SUM against targets (ignore_index -100 skipped), and the
  // whole [..., vocab_size] logits (for generation and inspection).
  virtual Tensor vocabulary_loss_sum(const Tensor& logits, const Tensor& targets, std::int64_t vocab_size) const;
  virtual Tensor vocabulary_logits(const Tensor& logits, std::int64_t vocab_size) const;
  // The cross-entropy SUM of the head's logits of h [..., d] against targets (ignore_index -100
  // skipped), as vocabulary_loss_sum(head.logits(h), ...) gives it. Here: linear_cross_entropy_sum
  // (ops/loss.h), chunks of rows that never hold the [tokens, vocab] logits whole. A factory whose
  // vocabulary layers are not the plain ones (one that overrides vocabulary_loss_sum) overrides this
  // too: tensor parallelism keeps head.logits and its vocabulary-parallel loss.
  virtual Tensor head_loss_sum(const Tensor& h, const VocabularyHead& head, const Tensor& targets,
                               std::int64_t vocab_size) const;
};

// The plain layers (every weight whole on this rank).
const std::shared_ptr<const LayerFactory>& default_layer_factory();
// `factory`, or the default one when it is null: option structs hold a possibly-null factory.
const LayerFactory& layers_or_default(const std::shared_ptr<const LayerFactory>& factory);

}  // namespace wf::nn
