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

// The options of a branch (SelfAttentionOptions or MLPOptions) with what both branches take from
// the block: width, dropout, bias and init (each branch ends in a projection onto the residual
// stream, which uses out_init_std), plus the branch's own seed. The caller sets the rest.
template <class BranchOptions>
BranchOptions branch_options(const TransformerBlockOptions& block, std::uint64_t seed) {
  BranchOptions branch;
  branch.d_model = block.d_model;
  branch.dropout = block.dropout;
  branch.bias = block.bias;
  branch.init_std = block.init_std;
  branch.out_init_std = block.out_init_std;
  branch.seed = seed;
  return branch;
}

}  // namespace

TransformerBlock::TransformerBlock(const TransformerBlockOptions& options) : Module(options.seed), options_(options) {
  auto attn_options = branch_options<SelfAttentionOptions>(options, child_seed("attn"));
  attn_options.n_head = options.n_head;
  attn_options.n_kv_head = options.n_kv_head;
  attn_options.causal = options.causal;
  auto mlp_options = branch_options<MLPOptions>(options, child_seed("mlp"));
  mlp_options.d_ff = options.d_ff;
  mlp_options.activation = options.activation;

  norm1_ = register_module("norm1", make_norm(options.norm, options.d_model, options.norm_eps));
  attn_ = register_module("attn", std::make_shared<SelfAttention>(attn_options));
  norm2_ = register_module("norm2", make_norm(options.norm, options.d_model, options.norm_eps));
  mlp_ = register_module("mlp", std::make_shared<MLP>(mlp_options));
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
