#pragma once
// Writing a differentiable op by hand: subclass Function (or pass two lambdas to
// apply_function) and give a forward and a backward. Fused kernels, attention and the
// distributed attention strategies are all written this way, and so is every op in wf::ops.
//
//   struct Square : wf::autograd::Function {
//     TensorList forward(Context& ctx, const TensorList& in) override {
//       ctx.save_for_backward({in[0]});
//       return {mul(in[0], in[0])};           // runs with grad mode off
//     }
//     TensorList backward(Context& ctx, const TensorList& grad) override {
//       return {mul(grad[0], scale(ctx.saved()[0], 2.0))};
//     }
//     std::string name() const override { return "Square"; }
//   };
//   Tensor y = wf::autograd::apply_function(std::make_shared<Square>(), {x})[0];
//
// forward() sees its inputs detached (no history) and runs with grad mode off. backward()
// gets one gradient per output (zeros where an output received none) and returns one per
// input; it may return an undefined tensor for an input that needs no gradient
// (ctx.needs_input_grad(i) tells). backward() itself runs with grad mode off.
#include <functional>
#include <memory>
#include <string>

#include "wallfacer/autograd/node.h"

namespace wf::autograd {

class Context {
 public:
  void save_for_backward(TensorList tensors);
  // The saved tensors; wf::Error after the graph was freed by a backward without retain_graph.
  const TensorList& saved() const;
  bool needs_input_grad(std::size_t input) const;
  std::size_t num_inputs() const { return needs_input_grad_.size(); }

  void release();
  void set_needs_input_grad(std::vector<bool> needs) { needs_input_grad_ = std::move(needs); }

 private:
  TensorList saved_;
  std::vector<bool> needs_input_grad_;
  bool released_ = false;
};

class Function {
 public:
  virtual ~Function() = default;
  virtual TensorList forward(Context& ctx, const TensorList& inputs) = 0;
  virtual TensorList backward(Context& ctx, const TensorList& grad_outputs) = 0;
  virtual std::string name() const = 0;

  // True for a Function whose backward runs ops of its forward again and differentiates them
  // with a nested backward (checkpoint.h, nn::run_attention_block), so leaves those ops read
  // (captured parameters, not inputs) receive gradient from inside this node's backward. When
  // such a node is recorded, apply_function notes every leaf requiring grad that an op inside
  // forward() reads and gives the node an extra next edge to each one's AccumulateGrad (after
  // the inputs' edges; backward() still returns one gradient per input, the engine sends none
  // along the extra edges). The outer engine then knows the node still delivers to those leaves
  // and runs their sinks, and fires their ready hooks (grad_hooks.h), only after it.
  virtual bool recomputes_in_backward() const { return false; }
};

// Runs fn->forward and, when grad mode is on and an input requires grad, records a node so
// the outputs carry history. Undefined inputs are allowed (optional arguments).
TensorList apply_function(std::shared_ptr<Function> fn, const TensorList& inputs);

using ForwardFn = std::function<TensorList(Context&, const TensorList&)>;
using BackwardFn = std::function<TensorList(Context&, const TensorList&)>;
// The same with lambdas: the shortest way to write an op.
TensorList apply_function(std::string name, const TensorList& inputs, ForwardFn forward, BackwardFn backward);

}  // namespace wf::autograd
