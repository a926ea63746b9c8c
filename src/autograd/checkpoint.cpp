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
    rng_state_ = default_generator().state();
    ctx.save_for_backward(inputs);
    return fn_(inputs);  // grad mode is off here: nothing inside is recorded
  }

  TensorList backward(Context& ctx, const TensorList& grad_outputs) override {
    // Fresh leaves for the recompute, so its backward stops at them.
    TensorList inputs;
    for (std::size_t i = 0; i < ctx.saved().size(); ++i) {
      const Tensor& saved = ctx.saved()[i];
      Tensor leaf = saved.defined() ? saved.detach() : Tensor();
      if (leaf.defined() && ctx.needs_input_grad(i)) leaf.set_requires_grad(true);
      inputs.push_back(leaf);
    }

    TensorList outputs;
    {
      const Generator::State resume = default_generator().state();
      default_generator().set_state(rng_state_);
      EnableGradGuard grad;
      outputs = fn_(inputs);
      default_generator().set_state(resume);
    }

    TensorList roots, grads;
    for (std::size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) autograd::backward(roots, grads);

    TensorList input_grads;
    for (const auto& leaf : inputs) input_grads.push_back(leaf.defined() ? leaf.grad() : Tensor());
    return input_grads;
  }

  std::string name() const override { return "Checkpoint"; }

 private:
  CheckpointFn fn_;
  Generator::State rng_state_;
};

}  // namespace

TensorList checkpoint(CheckpointFn fn, const TensorList& inputs) {
  return apply_function(std::make_shared<CheckpointFunction>(std::move(fn)), inputs);
}

}  // namespace wf::autograd
