#include "wallfacer/nn/attention_strategy.h"

namespace wf::nn {

AttentionStrategy::~AttentionStrategy() = default;

AttentionResult LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionOptions& options) {
  return attention(q, k, v, options);
}

}  // namespace wf::nn
