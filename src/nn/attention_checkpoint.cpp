#include "wallfacer/nn/attention_checkpoint.h"

#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/ops/arithmetic.h"

namespace wf::nn {
namespace {

using autograd::TensorList;

// A fresh leaf on t's storage, so a recompute's backward stops there and leaves its gradient.
Tensor leaf(const Tensor& t) {
  Tensor l = t.detach();
  l.set_requires_grad(true);
  return l;
}

// a + b where either may be undefined (an input that one half of the block does not read).
Tensor sum_defined(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

// The block as one graph node (see the header). forward runs with grad mode off, so nothing
// inside it is kept; backward recomputes the two parts around attention, each from fresh
// leaves, and chains them through the strategy's replay.
class AttentionOutputCheckpoint final : public autograd::Function {
 public:
  explicit AttentionOutputCheckpoint(AttentionSplit split) : split_(std::move(split)) {}

  TensorList forward(autograd::Context& ctx, const TensorList& inputs) override {
    before_rng_ = rng_snapshot();
    const AttentionHeads heads = split_.before(inputs);
    const AttentionResult attention = split_.strategy->forward(heads.q, heads.k, heads.v, split_.options);
    after_rng_ = rng_snapshot();  // the dropout masks after attention are replayed
    TensorList outputs = split_.after(inputs, attention.out);
    TensorList saved = inputs;
    saved.push_back(attention.out);
    saved.push_back(attention.lse);
    ctx.save_for_backward(std::move(saved));
    return outputs;
  }

  TensorList backward(autograd::Context& ctx, const TensorList& grad) override {
    const TensorList& saved_all = ctx.saved();
    const TensorList inputs(saved_all.begin(), saved_all.end() - 2);
    const AttentionResult saved{saved_all[saved_all.size() - 2], saved_all[saved_all.size() - 1]};

    // After attention: d_outputs → d_out, the inputs' share through `after`, its weight grads.
    const TensorList in_after = autograd::recompute_inputs(ctx, inputs);
    const Tensor out = leaf(saved.out);
    TensorList outputs;
    {
      const ReplayedGenerator rng(after_rng_);
      autograd::EnableGradGuard record;
      outputs = split_.after(in_after, out);
    }
    autograd::backward_recomputed(outputs, grad);

    // Before attention, with attention replayed (not run): d_out → the inputs' share through
    // `before` and its weight grads. lse gets no gradient (the engine hands the replay zeros).
    const TensorList in_before = autograd::recompute_inputs(ctx, inputs);
    AttentionResult replayed;
    {
      const ReplayedGenerator rng(before_rng_);
      autograd::EnableGradGuard record;
      const AttentionHeads heads = split_.before(in_before);
      replayed = split_.strategy->replay(heads.q, heads.k, heads.v, split_.options, saved);
    }
    if (out.grad().defined()) autograd::backward_recomputed({replayed.out}, {out.grad()});

    TensorList input_grads;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const bool differentiable = ctx.needs_input_grad(i) && in_after[i].defined() && in_after[i].requires_grad();
      input_grads.push_back(differentiable ? sum_defined(in_after[i].grad(), in_before[i].grad()) : Tensor());
    }
    return input_grads;
  }

  std::string name() const override { return "AttentionOutputCheckpoint"; }
  bool recomputes_in_backward() const override { return true; }

 private:
  AttentionSplit split_;
  RngSnapshot before_rng_, after_rng_;
};

bool records_graph(const TensorList& inputs) {
  if (!autograd::grad_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

}  // namespace

TensorList run_attention_block(AttentionSplit split, const TensorList& inputs, bool checkpoint) {
  WF_CHECK(split.before && split.after && split.strategy,
           "run_attention_block: the split needs before, after and an attention strategy");
  if (checkpoint && records_graph(inputs)) {
    return autograd::apply_function(std::make_shared<AttentionOutputCheckpoint>(std::move(split)), inputs);
  }
  const AttentionHeads heads = split.before(inputs);
  const Tensor out = split.strategy->forward(heads.q, heads.k, heads.v, split.options).out;
  return split.after(inputs, out);
}

}  // namespace wf::nn
