#pragma once
// Per-leaf "gradient accumulated" hooks: a callback that runs right after AccumulateGrad has
// added a gradient into a leaf's grad(), for code that acts on a gradient as soon as the
// backward produced it (the trainer's overlapped gradient all-reduce, train/grad_reducer.h).
//
// When it fires: once per AccumulateGrad application. Each use of a leaf in a recorded graph
// gets its own AccumulateGrad sink (gradient_edge, node.h), and the engine runs each sink once
// per backward, after summing everything that flowed into it. So in a plain backward the hook
// fires once for a leaf used by one recorded op, with grad() final; a leaf used by k recorded
// ops (a tied weight) fires k times, and grad() is final only after the last. Under activation
// checkpointing (checkpoint.h) the ops of a checkpointed function are recorded again during the
// outer backward and differentiated by a nested backward, so their parameters fire from inside
// it: once per use per nested backward, and several times per outer backward when a weight
// appears in several checkpointed segments. A consumer that needs "this gradient is final"
// must count fires; GradReducer learns the count per backward from an earlier backward.
//
// Hooks run on the thread that runs backward, with grad mode off; a hook that throws aborts
// the backward. A leaf has at most one hook (setting replaces it). The registry holds the leaf
// weakly: a hook never keeps a tensor alive, and one left behind by a destroyed leaf never runs.
#include <functional>
#include <memory>

#include "wallfacer/core/tensor.h"

namespace wf::autograd {

using GradAccumulatedHook = std::function<void(const Tensor& leaf)>;

// `leaf`: a tensor without grad_fn (a parameter). wf::Error for a non-leaf.
void set_grad_accumulated_hook(const Tensor& leaf, GradAccumulatedHook hook);
void clear_grad_accumulated_hook(const Tensor& leaf);
// Called by AccumulateGrad after it updated leaf.grad(): runs the leaf's hook, if any.
void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf);

}  // namespace wf::autograd

// TEMP (replaced by the engine's implementation): declared so the reducer compiles.
namespace wf::autograd {
using GradReadyHook = std::function<void(const Tensor& leaf)>;
void set_grad_ready_hook(const Tensor& leaf, GradReadyHook hook);
void clear_grad_ready_hook(const Tensor& leaf);
}  // namespace wf::autograd
