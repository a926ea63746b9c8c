#include "wallfacer/nn/transformer_block.h"

#include <fmt/ranges.h>

#include <functional>

#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/nn/attention_checkpoint.h"
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
// stream, which uses out_init_std), the layer factory, plus the branch's own seed. The caller
// sets the rest.
template <class BranchOptions>
BranchOptions branch_options(const TransformerBlockOptions& block, std::uint64_t seed) {
  BranchOptions branch;
  branch.d_model = block.d_model;
  branch.dropout = block.dropout;
  branch.bias = block.bias;
  branch.init_std = block.init_std;
  branch.out_init_std = block.out_init_std;
  branch.seed = seed;
  branch.layers = block.layers;
  return branch;
}

}  // namespace

SelfAttentionOptions block_attention_options(const TransformerBlockOptions& options, std::uint64_t seed) {
  auto attention = branch_options<SelfAttentionOptions>(options, seed);
  attention.n_head = options.n_head;
  attention.n_kv_head = options.n_kv_head;
  attention.causal = options.causal;
  attention.rope = options.rope;
  attention.rope_theta = options.rope_theta;
  return attention;
}

MLPOptions block_feed_forward_options(const TransformerBlockOptions& options, std::uint64_t seed) {
  auto mlp = branch_options<MLPOptions>(options, seed);
  mlp.d_ff = options.d_ff;
  mlp.activation = options.activation;
  return mlp;
}

std::shared_ptr<FeedForward> make_block_feed_forward(const TransformerBlockOptions& o, const MLPOptions& mlp) {
  if (o.make_feed_forward) {
    auto module = o.make_feed_forward(mlp);
    WF_CHECK(module != nullptr, "TransformerBlock: make_feed_forward returned no module");
    return module;
  }
  switch (o.feed_forward) {
    case FeedForwardKind::mlp: return std::make_shared<MLP>(mlp);
    case FeedForwardKind::swiglu: return std::make_shared<SwiGLU>(mlp);
  }
  WF_FAIL("TransformerBlock: unknown feed-forward kind {}", static_cast<int>(o.feed_forward));
}

std::shared_ptr<Normalization> make_block_norm(const TransformerBlockOptions& o) {
  if (o.make_norm) {
    auto module = o.make_norm(o.d_model, o.norm_eps);
    WF_CHECK(module != nullptr, "TransformerBlock: make_norm returned no module");
    return module;
  }
  return layers_or_default(o.layers).norm(o.norm, o.d_model, o.norm_eps);
}

double feed_forward_parameter_count(const TransformerBlockOptions& o) {
  const double d = static_cast<double>(o.d_model);
  const double ff = static_cast<double>(o.d_ff > 0 ? o.d_ff : 4 * o.d_model), bias = o.bias ? 1.0 : 0.0;
  // MLP: fc [ff, d] (+ ff), proj [d, ff] (+ d); SwiGLU: gate and up [ff, d] (+ ff each), down [d, ff] (+ d).
  const double in_layers = o.feed_forward == FeedForwardKind::swiglu ? 2 : 1;
  return in_layers * (d * ff + bias * ff) + ff * d + bias * d;
}

double transformer_block_parameter_count(const TransformerBlockOptions& o) {
  return self_attention_parameter_count(block_attention_options(o, 0)) + feed_forward_parameter_count(o) +
         2 * norm_parameter_count(o.norm, o.d_model);
}

const char* feed_forward_name(FeedForwardKind kind) {
  switch (kind) {
    case FeedForwardKind::mlp: return "mlp";
    case FeedForwardKind::swiglu: return "swiglu";
  }
  return "unknown";
}

TransformerBlock::TransformerBlock(const TransformerBlockOptions& options)
    : SequenceBlock(options.seed), options_(options) {
  norm1_ = register_module("norm1", make_block_norm(options));
  attn_ = register_module("attn",
                          std::make_shared<SelfAttention>(block_attention_options(options, child_seed("attn"))));
  norm2_ = register_module("norm2", make_block_norm(options));
  mlp_ = register_module("mlp",
                         make_block_feed_forward(options, block_feed_forward_options(options, child_seed("mlp"))));
}

MLP& TransformerBlock::mlp() {
  auto* mlp = dynamic_cast<MLP*>(mlp_.get());
  WF_CHECK(mlp != nullptr, "TransformerBlock: the feed-forward is not the GELU MLP (use feed_forward())");
  return *mlp;
}

Tensor TransformerBlock::forward(const Tensor& x, std::int64_t position_offset) {
  WF_CHECK(x.defined() && x.dim() == 3, "TransformerBlock: input must be [batch, tokens, d_model], got {}",
           x.defined() ? shape_str(x.shape()) : "undefined");
  WF_CHECK(position_offset >= 0, "TransformerBlock: position_offset must be >= 0, got {}", position_offset);
  // With activation sharding x holds this rank's slice of the tokens; attention sees them all.
  const std::int64_t tokens = x.size(1) * layers_or_default(options_.layers).activation_token_parts();
  return run(x, attn_->contiguous_positions(position_offset, tokens, x.device()),
             attn_->attention_options(position_offset));
}

Tensor TransformerBlock::forward(const Tensor& x, const TokenPositions& where) {
  const Tensor& positions = where.positions;
  WF_CHECK(positions.defined(), "TransformerBlock: positions are undefined; pass [tokens] global positions (i64) "
           "or use forward(x, position_offset)");
  const int parts = layers_or_default(options_.layers).activation_token_parts();
  const std::int64_t tokens = positions.dim() >= 1 ? positions.size(positions.dim() - 1) : 0;
  WF_CHECK(parts == 1 || !x.defined() || x.dim() != 3 || positions.dim() < 1 || tokens == x.size(1) * parts,
           "TransformerBlock: the layers shard activations over tp = {} ranks, so x [{}] should hold 1/{} of the {} "
           "positions' tokens; enter the sharded stream with layers.shard_activations(x) before the blocks",
           parts, fmt::join(x.shape(), ", "), parts, tokens);
  // Sequence-parallel strategies know their layout: they take offsets 0 (see SelfAttention).
  return run(x, positions, attn_->attention_options(where));
}

Tensor TransformerBlock::run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options) {
  const bool checkpoint_output = options_.checkpoint_attention;
  AttentionSplit split;
  // Captured by value where the checkpoint's backward runs them after this call has returned.
  split.before = [this, positions](const autograd::TensorList& in) {
    return attn_->project(norm1_->forward(in[0]), positions);
  };
  split.after = [this, checkpoint_output](const autograd::TensorList& in, const Tensor& out) {
    // Inside the checkpoint the MLP is recomputed anyway: no second checkpoint around it.
    return autograd::TensorList{after_attention(in[0], out, options_.checkpoint_mlp && !checkpoint_output)};
  };
  split.strategy = attn_->strategy();
  split.options = attention_options;
  return run_attention_block(std::move(split), {x}, checkpoint_output)[0];
}

Tensor TransformerBlock::after_attention(const Tensor& x, const Tensor& attention_out, bool checkpoint_mlp) {
  const Tensor branch = attn_->output(attention_out);
  if (checkpoint_mlp) {
    // The checkpoint keeps only h and replays norm2 with the feed-forward, so the norm stays inside.
    const Tensor h = add(x, branch);
    // Captured by value: a checkpointed branch runs again during backward.
    const auto mlp_branch = [this](const Tensor& in) { return mlp_->forward(norm2_->forward(in)); };
    return add(h, run_branch(true, mlp_branch, h));
  }
  // The residual add and norm2 in one pass (bitwise the add, then norm2). The attention branch's
  // residual stays there rather than in the output projection: that would cost the add-norm fusion.
  const AddNorm h = norm2_->forward_add(x, branch);
  // The feed-forward's residual add inside its output projection (FeedForward::forward_add; add(h.sum,
  // mlp(h.y))'s bits on the CPU, the GEMM's epilogue where a backend fuses it).
  return mlp_->forward_add(h.y, h.sum);
}

void TransformerBlock::set_checkpointing(bool attention_output, bool mlp) {
  options_.checkpoint_attention = attention_output;
  options_.checkpoint_mlp = mlp;
}

}  // namespace wf::nn
