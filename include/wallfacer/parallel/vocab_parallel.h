#pragma once
// Vocabulary parallelism (Megatron-LM): the token embedding's rows and the output logits'
// columns split over the tp group, so neither the [V, D] table nor the [tokens, V] logits ever
// sit whole on one rank — at GPT-2's 50257 tokens they are the largest tensors of a small model.
//
// The vocabulary is padded to V_pad = padded_vocab_size(V, tp), the next multiple of tp, and
// rank r holds indices [r·V_pad/tp, (r+1)·V_pad/tp). The padding rows / columns exist only past
// the real vocabulary: no id looks them up (their embedding rows are zeros and get no
// gradient) and the loss masks their logits to -inf (they change neither loss nor gradient).
//
// The group is held by reference in the layer and the autograd graph: it must outlive both.
#include <cstdint>

#include "wallfacer/comm/group.h"
#include "wallfacer/nn/embedding.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/parallel/tensor_parallel.h"

namespace wf::parallel {

// `vocab` rounded up to a multiple of `parts` (50257 over 2 → 50258).
std::int64_t padded_vocab_size(std::int64_t vocab, int parts);

// An embedding table [V, D] split by rows over `tp`: this rank holds weight [V_pad/tp, D],
// rows [r·V_pad/tp, (r+1)·V_pad/tp) of the padded table, each real row bit for bit the row of
// nn::Embedding(options)'s weight, the padded rows zeros. Its ParameterShard is dim 0 of the
// padded [V_pad, D] (whoever consolidates drops rows >= options().num_embeddings).
// forward(ids) takes the whole (replicated) ids, each in [0, V): every rank looks up the ids it
// holds, gives zeros for the others, and one all-reduce (reduce_from_tp) sums the partial
// lookups into the replicated [..., D] output. Backward: each rank's rows get the gradient of
// the ids it holds (reduce_from_tp's backward is the identity).
class VocabParallelEmbedding : public nn::Embedding {
 public:
  // tp_options.shard_activations: attend takes this rank's tokens and gathers them (the lookup
  // stays all-reduced into the whole tokens; the model then calls shard_activations).
  VocabParallelEmbedding(const nn::EmbeddingOptions& options, comm::Group& tp,
                         const TensorParallelOptions& tp_options = {});
  Tensor forward(const Tensor& ids) override;
  // The tied head: h (replicated) → this rank's [..., V_pad/tp] logits columns, h entering the
  // split region through column_parallel_input (its gradient summed over tp in the backward).
  Tensor attend(const Tensor& h) override;
  comm::Group& group() const { return *tp_; }
  // This rank's vocabulary indices [vocab_start(), vocab_start() + weight().size(0)).
  std::int64_t vocab_start() const { return parameter_shard("weight").start(); }

 private:
  comm::Group* tp_;
  TensorParallelOptions tp_options_;
};

// The untied output head y = x · Wᵀ, W [V, D] (options: in_features D, out_features V, no
// bias), split by rows over `tp` exactly as VocabParallelEmbedding splits its table: this rank
// holds rows [r·V_pad/tp, (r+1)·V_pad/tp) of the padded [V_pad, D], real rows bit for bit the
// plain Linear's, padding rows zeros. forward(x) takes the replicated x and gives this rank's
// [..., V_pad/tp] logits columns, for vocab_parallel_cross_entropy.
class VocabParallelLinear : public nn::Linear {
 public:
  // tp_options.shard_activations: x is this rank's tokens, gathered first (column_parallel_input).
  VocabParallelLinear(const nn::LinearOptions& options, comm::Group& tp, const TensorParallelOptions& tp_options = {});
  Tensor forward(const Tensor& x) override;
  comm::Group& group() const { return *tp_; }

 private:
  comm::Group* tp_;
  TensorParallelOptions tp_options_;
};

enum class LossReduction { mean, sum };

// Softmax cross-entropy over logits split by vocabulary: logits_shard [..., V_pad/tp] is this
// rank's columns [r·V_pad/tp, (r+1)·V_pad/tp) of the padded logits (what a column-parallel
// output head without gather_output gives), targets [...] (i64 / i32, replicated) each in
// [0, vocab_size) or ignore_index. The loss is the same (replicated) scalar on every rank:
// wf::cross_entropy (mean over the targets that are not ignored, 0 when all are) or, with
// LossReduction::sum, wf::cross_entropy_sum of the whole [..., vocab_size] logits.
//
// Forward: two all-reduces of per-row numbers instead of gathering the logits — the max, then
// the sum of exponentials and the target logit (held by one rank, 0 elsewhere) together;
// columns >= vocab_size count as -inf.
// Backward (no communication): softmax(logits) − onehot(target) on this rank's columns, times
// the scale (1/count for the mean); zeros for ignored rows and padded columns.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets, comm::Group& tp,
                                    std::int64_t vocab_size, std::int64_t ignore_index = -100,
                                    LossReduction reduction = LossReduction::mean);

}  // namespace wf::parallel
