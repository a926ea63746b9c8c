#include "wallfacer/nn/transformer_block.h"

#include <functional>

#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/rng.h"
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
  attn_options.rope = options.rope;
  attn_options.rope_theta = options.rope_theta;
  auto mlp_options = branch_options<MLPOptions>(options, child_seed("mlp"));
  mlp_options.d_ff = options.d_ff;
  mlp_options.activation = options.activation;

  norm1_ = register_module("norm1", make_norm(options.norm, options.d_model, options.norm_eps));
  attn_ = register_module("attn", std::make_shared<SelfAttention>(attn_options));
  norm2_ = register_module("norm2", make_norm(options.norm, options.d_model, options.norm_eps));
  mlp_ = register_module("mlp", std::make_shared<MLP>(mlp_options));
}

// The block as one graph node that keeps x, the attention output and its lse (see the header).
// forward runs with grad mode off, so nothing inside it is kept; backward recomputes the two
// parts around attention, each from fresh leaves, and chains them through the strategy's replay.
class TransformerBlock::AttentionOutputCheckpoint final : public autograd::Function {
 public:
  AttentionOutputCheckpoint(TransformerBlock& block, Tensor positions, const AttentionOptions& options)
      : block_(block), strategy_(block.attn_->strategy()), positions_(std::move(positions)), options_(options) {}

  // inputs: x; outputs: the block's output
  autograd::TensorList forward(autograd::Context& ctx, const autograd::TensorList& in) override {
    const Tensor& x = in[0];
    const SelfAttention::Heads heads = block_.attn_->project(block_.norm1_->forward(x), positions_);
    const AttentionResult attention = strategy_->forward(heads.q, heads.k, heads.v, options_);
    rng_state_ = default_generator().state();  // the dropout masks after attention are replayed
    Tensor y = block_.after_attention(x, attention.out, /*checkpoint_mlp=*/false);
    ctx.save_for_backward({x, attention.out, attention.lse});
    return {y};
  }

  autograd::TensorList backward(autograd::Context& ctx, const autograd::TensorList& grad) override {
    const Tensor& x = ctx.saved()[0];
    const AttentionResult saved{ctx.saved()[1], ctx.saved()[2]};

    // After attention: dy → d_out, the residual's share of dx, and proj/norm2/MLP weight grads.
    const Tensor x_after = leaf(x), out = leaf(saved.out);
    Tensor y;
    {
      const ReplayRng rng(rng_state_);
      autograd::EnableGradGuard record;
      y = block_.after_attention(x_after, out, /*checkpoint_mlp=*/false);
    }
    autograd::backward({y}, {grad[0]});

    // Before attention, with attention replayed (not run): d_out → the rest of dx and the
    // norm1/qkv weight grads. lse gets no gradient (the engine hands the replay zeros).
    const Tensor x_before = leaf(x);
    AttentionResult replayed;
    {
      autograd::EnableGradGuard record;
      const SelfAttention::Heads heads = block_.attn_->project(block_.norm1_->forward(x_before), positions_);
      replayed = strategy_->replay(heads.q, heads.k, heads.v, options_, saved);
    }
    autograd::backward({replayed.out}, {out.grad()});
    return {add(x_after.grad(), x_before.grad())};
  }

  std::string name() const override { return "TransformerBlockAttentionOutputCheckpoint"; }

 private:
  // A fresh leaf on t's storage, so a recompute's backward stops there and leaves its gradient.
  static Tensor leaf(const Tensor& t) {
    Tensor l = t.detach();
    l.set_requires_grad(true);
    return l;
  }

  // Sets the default generator to `state` for a scope and restores where it was, also when
  // the recompute throws: the rest of training must not see the replayed draws.
  class ReplayRng {
   public:
    explicit ReplayRng(Generator::State state) : resume_(default_generator().state()) {
      default_generator().set_state(state);
    }
    ~ReplayRng() { default_generator().set_state(resume_); }
    ReplayRng(const ReplayRng&) = delete;
    ReplayRng& operator=(const ReplayRng&) = delete;

   private:
    Generator::State resume_;
  };

  TransformerBlock& block_;
  std::shared_ptr<AttentionStrategy> strategy_;  // the one that ran forward replays it
  Tensor positions_;
  AttentionOptions options_;
  Generator::State rng_state_;
};

Tensor TransformerBlock::forward(const Tensor& x, std::int64_t position_offset) {
  WF_CHECK(x.defined() && x.dim() == 3, "TransformerBlock: input must be [batch, tokens, d_model], got {}",
           x.defined() ? shape_str(x.shape()) : "undefined");
  WF_CHECK(position_offset >= 0, "TransformerBlock: position_offset must be >= 0, got {}", position_offset);
  return run(x, attn_->contiguous_positions(position_offset, x.size(1)), attn_->attention_options(position_offset));
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& positions) {
  WF_CHECK(positions.defined(), "TransformerBlock: positions are undefined; pass [tokens] global positions (i64) "
           "or use forward(x, position_offset)");
  // Sequence-parallel strategies know their layout: they take offsets 0 (see SelfAttention).
  return run(x, positions, attn_->attention_options(0));
}

Tensor TransformerBlock::run(const Tensor& x, const Tensor& positions, const AttentionOptions& attention_options) {
  if (options_.checkpoint_attention_output && autograd::grad_enabled() && x.requires_grad()) {
    return autograd::apply_function(std::make_shared<AttentionOutputCheckpoint>(*this, positions, attention_options),
                                    {x})[0];
  }
  const SelfAttention::Heads heads = attn_->project(norm1_->forward(x), positions);
  const Tensor out = attn_->strategy()->forward(heads.q, heads.k, heads.v, attention_options).out;
  return after_attention(x, out, options_.checkpoint_mlp);
}

Tensor TransformerBlock::after_attention(const Tensor& x, const Tensor& attention_out, bool checkpoint_mlp) {
  const Tensor h = add(x, attn_->output(attention_out));
  // Captured by value: a checkpointed branch runs again during backward.
  const auto mlp_branch = [this](const Tensor& in) { return mlp_->forward(norm2_->forward(in)); };
  return add(h, run_branch(checkpoint_mlp, mlp_branch, h));
}

void TransformerBlock::set_checkpointing(bool attention_output, bool mlp) {
  options_.checkpoint_attention_output = attention_output;
  options_.checkpoint_mlp = mlp;
}

}  // namespace wf::nn
