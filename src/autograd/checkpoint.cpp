#include "wallfacer/autograd/checkpoint.h"

#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/rng.h"

namespace wf::autograd {
namespace {

class CheckpointFunction final : public Function {
 public:
  explicit CheckpointFunction(CheckpointFn fn) : fn_(std::move(fn)) {}

  TensorList forward(Context& ctx, const TensorList& inputs) override {
    rng_state_ = rng_snapshot();
    ctx.save_for_backward(inputs);
    return fn_(inputs);  // grad mode is off here: nothing inside is recorded
  }

  TensorList backward(Context& ctx, const TensorList& grad_outputs) override {
    const TensorList inputs = recompute_inputs(ctx, ctx.saved());
    TensorList outputs;
    {
      const ReplayedGenerator rng(rng_state_);
      EnableGradGuard grad;
      outputs = fn_(inputs);
    }
    backward_recomputed(outputs, grad_outputs);

    TensorList input_grads;
    for (const auto& leaf : inputs) input_grads.push_back(leaf.defined() ? leaf.grad() : Tensor());
    return input_grads;
  }

  std::string name() const override { return "Checkpoint"; }
  bool recomputes_in_backward() const override { return true; }

 private:
  CheckpointFn fn_;
  RngSnapshot rng_state_;
};

}  // namespace

TensorList recompute_inputs(const Context& ctx, const TensorList& saved) {
  TensorList inputs;
  inputs.reserve(saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    Tensor leaf = saved[i].defined() ? saved[i].detach() : Tensor();
    if (leaf.defined() && ctx.needs_input_grad(i)) leaf.set_requires_grad(true);
    inputs.push_back(leaf);
  }
  return inputs;
}

void backward_recomputed(const TensorList& outputs, const TensorList& grads) {
  TensorList roots, root_grads;
  for (std::size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
  }
  if (!roots.empty()) backward(roots, root_grads);
}

TensorList checkpoint(CheckpointFn fn, const TensorList& inputs) {
  return apply_function(std::make_shared<CheckpointFunction>(std::move(fn)), inputs);
}

}  // namespace wf::autograd
