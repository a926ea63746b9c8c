#pragma once
// Activation checkpointing: checkpoint(fn, inputs) runs fn without recording a graph (its
// intermediate activations are freed at once) and, during backward, runs it again with
// recording on to get the gradients. The default generator's state is saved before the first
// run and replayed for the second, so dropout draws the same masks both times.
//
// Parameters fn uses (captured module weights) receive their gradients during the recompute.
// As with PyTorch's reentrant checkpoint, at least one input must require grad for the
// checkpoint to be part of the graph.
#include <functional>

#include "wallfacer/autograd/node.h"

namespace wf::autograd {

using CheckpointFn = std::function<TensorList(const TensorList&)>;
TensorList checkpoint(CheckpointFn fn, const TensorList& inputs);

}  // namespace wf::autograd
