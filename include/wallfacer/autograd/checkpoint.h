#pragma once
// Activation checkpointing: checkpoint(fn, inputs) runs fn without recording a graph (its
// intermediate activations are freed at once) and, during backward, runs it again with
// recording on to get the gradients. The default generator's state is saved before the first
// run and replayed for the second, so dropout draws the same masks both times.
//
// Parameters fn uses (captured module weights) receive their gradients during the recompute,
// from a nested backward. The checkpoint's node has an edge to each one's AccumulateGrad
// (Function::recomputes_in_backward, function.h), so the outer backward runs a weight's sink and
// fires its ready hook (grad_hooks.h) only after every checkpoint using it has recomputed.
// As with PyTorch's reentrant checkpoint, at least one input must require grad for the
// checkpoint to be part of the graph.
#include <functional>

#include "wallfacer/autograd/node.h"

namespace wf::autograd {

using CheckpointFn = std::function<TensorList(const TensorList&)>;
TensorList checkpoint(CheckpointFn fn, const TensorList& inputs);

// The two steps every recomputing Function's backward takes (checkpoint above,
// nn::run_attention_block; such a Function also returns true from recomputes_in_backward):
// fresh inputs for the recompute: a leaf that requires grad where ctx needs input i's gradient
// (its backward stops there and leaves the gradient), the others detached; undefined stay so.
class Context;
TensorList recompute_inputs(const Context& ctx, const TensorList& saved);
// Backpropagates grads[i] into outputs[i] for the outputs that take part in the graph (an
// output that needs no gradient, e.g. a constant or an integer one, is skipped).
void backward_recomputed(const TensorList& outputs, const TensorList& grads);

}  // namespace wf::autograd
