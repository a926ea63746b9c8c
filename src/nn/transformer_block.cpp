#include "wallfacer/nn/transformer_block.h"

#include <functional>

#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf::nn {
namespace {

// branch(x), through an activation checkpoint when asked and when it can take part in a graph
// (checkpoint needs an input that requires grad; without recording it would only cost time).
// The checkpoint replays the branch during backward, after this call has returned, so it
// keeps its own copy of it.
Tensor run_branch(bool checkpointed, std::function<Tensor(const Tensor&)> branch, const Tensor& x) {
  if (!checkpointed || !autograd::grad_enabled() || !x.requires_grad()) return branch(x);
  auto replayable = [branch = std::move(branch)](const autograd::TensorList& in) {
    return autograd::TensorList{branch(in[0])};
  };
  return autograd::checkpoint(std::move(replayable), {x})[0];
}

}  // namespace

TransformerBlock::TransformerBlock(const TransformerBlockOptions& options) : Module(options.seed), options_(options) {
  norm1_ = register_module("norm1", make_norm(options.norm, options.d_model, options.norm_eps));
  attn_ = register_module("attn", std::make_shared<SelfAttention>(SelfAttentionOptions{
                                      .d_model = options.d_model,
                                      .n_head = options.n_head,
                                      .n_kv_head = options.n_kv_head,
                                      .causal = options.causal,
                                      .dropout = options.dropout,
                                      .bias = options.bias,
                                      .init_std = options.init_std,
                                      .out_init_std = options.out_init_std,
                                      .seed = child_seed("attn")}));
  norm2_ = register_module("norm2", make_norm(options.norm, options.d_model, options.norm_eps));
  mlp_ = register_module("mlp", std::make_shared<MLP>(MLPOptions{.d_model = options.d_model,
                                                                 .d_ff = options.d_ff,
                                                                 .activation = options.activation,
                                                                 .dropout = options.dropout,
                                                                 .bias = options.bias,
                                                                 .init_std = options.init_std,
                                                                 .out_init_std = options.out_init_std,
                                                                 .seed = child_seed("mlp")}));
}

Tensor TransformerBlock::forward(const Tensor& x, std::int64_t position_offset) {
  // Captured by value: a checkpointed branch runs again during backward.
  const auto attention_branch = [this, position_offset](const Tensor& in) {
    return attn_->forward(norm1_->forward(in), position_offset);
  };
  const auto mlp_branch = [this](const Tensor& in) { return mlp_->forward(norm2_->forward(in)); };
  const Tensor h = add(x, run_branch(options_.checkpoint_attention, attention_branch, x));
  return add(h, run_branch(options_.checkpoint_mlp, mlp_branch, h));
}

void TransformerBlock::set_checkpointing(bool attention, bool mlp) {
  options_.checkpoint_attention = attention;
  options_.checkpoint_mlp = mlp;
}

}  // namespace wf::nn
