#pragma once
// Per-leaf gradient hooks, for code that acts on a gradient as soon as the backward produced it
// (the trainer's overlapped gradient all-reduce, train/replica_gradients.h). Two kinds:
//
// "Gradient ready" (set_grad_ready_hook): fires exactly once per OUTERMOST backward for every
// hooked leaf that backward reaches, when the leaf's gradient for that backward is complete:
// grad() then holds it, summed with whatever grad() held before (gradient accumulation over
// microbatches). Precisely: every leaf has one AccumulateGrad sink shared by all its uses
// (gradient_edge, node.h), and the outermost engine fires the hook right after it ran that sink,
// which it does once every edge into the sink has delivered (its dependency count reached 0):
//   - a leaf used k times (a tied weight) fires once, after the sum of all k uses;
//   - a leaf used inside activation checkpointing (checkpoint.h, nn::run_attention_block) gets
//     its gradient from the nested backward of the recompute. While a recomputing Function's
//     forward runs, the leaves its ops read are recorded and the Function's node gets an edge
//     to each one's sink (function.h), so the outer engine waits for the recompute too: the hook
//     fires once, after every checkpointed segment and every use outside them. Nested backwards
//     never fire ready hooks;
//   - a leaf this backward does not reach (a layer skipped this step, a branch not taken) does
//     not fire: the consumer handles it when backward() returns, or asks
//     outermost_backward_reaches() from inside a hook to know it in advance;
//   - grad() may be undefined at fire time when no gradient reached the leaf (only through
//     ops that gave it none) and it held none before.
// "Outermost": a backward() not called from inside another backward on the same thread. A leaf
// that a recompute reads only in its backward but not in its forward (a graph that changes
// between the two) is not known to the outer engine: its gradient arrives, its hook does not fire.
//
// "Gradient accumulated" (set_grad_accumulated_hook): fires once per AccumulateGrad
// application, right after it added into grad(): once per backward for a leaf of a plain graph
// (all its uses are summed first), and additionally from each nested backward of a checkpoint
// recompute that reads it. grad() is final only at the last fire, which this hook cannot tell.
//
// Both kinds run on the thread that runs backward, with grad mode off; a hook that throws aborts
// the backward. A leaf has at most one hook of each kind (setting replaces it). The registry
// holds the leaf weakly: a hook never keeps a tensor alive, and one left behind by a destroyed
// leaf never runs.
#include <functional>
#include <memory>

#include "wallfacer/core/tensor.h"

namespace wf::autograd {

using GradAccumulatedHook = std::function<void(const Tensor& leaf)>;
using GradReadyHook = std::function<void(const Tensor& leaf)>;

// `leaf`: a tensor without grad_fn (a parameter). wf::Error for a non-leaf.
void set_grad_accumulated_hook(const Tensor& leaf, GradAccumulatedHook hook);
void clear_grad_accumulated_hook(const Tensor& leaf);
void set_grad_ready_hook(const Tensor& leaf, GradReadyHook hook);
void clear_grad_ready_hook(const Tensor& leaf);

// From inside a hook (or any code the backward runs): whether the outermost backward running on
// this thread reaches `leaf`, i.e. fires (or already fired) its ready hook. Lets a consumer
// settle the leaves a backward will skip as soon as it starts. False when no backward runs on
// this thread or `leaf` requires no grad.
bool outermost_backward_reaches(const Tensor& leaf);

// Called by AccumulateGrad after it updated leaf.grad(): runs the leaf's accumulated hook, if any.
void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf);
// Called by the outermost engine once leaf's gradient for the backward is complete.
void run_grad_ready_hook(const std::shared_ptr<TensorImpl>& leaf);

}  // namespace wf::autograd
