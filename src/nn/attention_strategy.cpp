#include "wallfacer/nn/attention_strategy.h"

#include "wallfacer/core/error.h"

namespace wf::nn {

AttentionStrategy::~AttentionStrategy() = default;

AttentionResult AttentionStrategy::replay(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&,
                                          const AttentionResult&) {
  WF_FAIL("{} attention cannot replay a saved forward, so it cannot be used with activation "
          "checkpointing at the attention output (model.checkpoint_attention: false)",
          name());
}

AttentionResult LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionOptions& options) {
  return attention(q, k, v, options);
}

AttentionResult LocalAttention::replay(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionOptions& options, const AttentionResult& saved) {
  return attention_replay(q, k, v, options, saved);
}

}  // namespace wf::nn
