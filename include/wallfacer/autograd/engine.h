#pragma once
// The backward pass: from root tensors and their gradients, walk the graph in topological
// order (a node runs once every gradient flowing into it has arrived), sum gradients that meet,
// accumulate into leaves' grad(), and free saved tensors behind it unless retain_graph.
// Re-entrant: a node's backward may itself call backward (activation checkpointing does).
#include "wallfacer/autograd/node.h"

namespace wf::autograd {

// grads[i] is the gradient of roots[i] (an outside gradient, e.g. from the next pipeline
// stage); an undefined grads[i] means ones and is allowed only for one-element roots.
void backward(const TensorList& roots, const TensorList& grads = {}, bool retain_graph = false);

}  // namespace wf::autograd
