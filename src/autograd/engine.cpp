#include "wallfacer/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/autograd/grad_mode.h"

namespace wf::autograd {
namespace {

struct NewestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Number of edges pointing into each node reachable from the roots; every reachable node has
// an entry (the roots too), so the map is also the set of nodes this backward reaches.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> deps;
  for (Node* root : roots) deps.try_emplace(root, 0);
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  std::vector<Node*> stack(seen.begin(), seen.end());  // each root once, even if several roots share a node
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return deps;
}

Tensor root_gradient(const Tensor& root, const Tensor& grad) {
  if (grad.defined()) {
    WF_CHECK(grad.shape() == root.shape(), "backward: gradient of shape {} for a tensor of shape {}",
             shape_str(grad.shape()), shape_str(root.shape()));
    return grad;
  }
  WF_CHECK(root.numel() == 1,
           "backward() without a gradient needs a one-element tensor (a loss), got shape {}; pass the "
           "gradient explicitly: t.backward(grad)",
           shape_str(root.shape()));
  return Tensor::ones(root.shape(), root.dtype(), root.device());
}

// The dependency counts of the outermost backward running on this thread; null when none runs.
// A backward that starts while it is set is nested (a checkpoint's recompute) and fires no ready
// hooks: the outermost one fires them once its own counts say a leaf is complete.
thread_local const std::unordered_map<Node*, int>* t_outermost = nullptr;

class OutermostScope {
 public:
  explicit OutermostScope(const std::unordered_map<Node*, int>& deps) : active_(t_outermost == nullptr) {
    if (active_) t_outermost = &deps;
  }
  ~OutermostScope() {
    if (active_) t_outermost = nullptr;
  }
  OutermostScope(const OutermostScope&) = delete;
  OutermostScope& operator=(const OutermostScope&) = delete;
  bool outermost() const { return active_; }

 private:
  bool active_;
};

}  // namespace

bool outermost_backward_reaches(const Tensor& leaf) {
  if (t_outermost == nullptr || !leaf.defined() || leaf.grad_fn() != nullptr || !leaf.requires_grad()) return false;
  const std::shared_ptr<Node> sink = leaf.impl_ptr()->autograd_meta().grad_accumulator.lock();
  return sink != nullptr && t_outermost->contains(sink.get());
}

void backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  WF_CHECK(grads.empty() || grads.size() == roots.size(), "backward: {} roots but {} gradients", roots.size(),
           grads.size());
  NoGradGuard no_grad;  // backward functions compute with plain tensors

  // Gradient buffers, one slot per node output; slots are summed as gradients arrive. The first
  // arrival may alias a tensor someone else owns (an add's backward hands the same gradient to
  // both inputs), so the second sums into a private copy, which later arrivals add into in place.
  struct Slot {
    Tensor grad;
    bool owned = false;  // grad is the engine's own copy
  };
  std::unordered_map<Node*, std::vector<Slot>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  auto add_to_buffer = [&](const std::shared_ptr<Node>& node, int slot, const Tensor& g) {
    auto& buf = buffers[node.get()];
    if (buf.empty()) buf.resize(node->outputs().size());
    Slot& dst = buf.at(static_cast<std::size_t>(slot));
    if (!dst.grad.defined()) {
      dst.grad = g;
    } else {
      if (!dst.owned) {
        dst.grad = dst.grad.clone();
        dst.owned = true;
      }
      accumulate_into(dst.grad, g);
    }
    keep_alive.emplace(node.get(), node);
  };

  std::vector<Node*> root_nodes;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    WF_CHECK(root.defined(), "backward: root {} is undefined", i);
    WF_CHECK(root.requires_grad(),
             "backward: root {} (shape {}) does not require grad and has no grad_fn: nothing to differentiate; "
             "did a NoGradGuard or detach() cut the graph?",
             i, shape_str(root.shape()));
    Edge edge = gradient_edge(root);
    add_to_buffer(edge.node, edge.output_nr, root_gradient(root, grads.empty() ? Tensor() : grads[i]));
    root_nodes.push_back(edge.node.get());
  }

  auto deps = count_dependencies(root_nodes);
  const OutermostScope scope(deps);
  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  std::unordered_set<Node*> queued;
  for (Node* node : root_nodes) {
    if (deps[node] == 0 && queued.insert(node).second) ready.push(node);
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList grad_inputs;
    auto buffer = buffers.find(node);
    if (buffer != buffers.end()) {  // a node no gradient reached has nothing to propagate
      TensorList grad_outputs;
      grad_outputs.reserve(buffer->second.size());
      for (std::size_t i = 0; i < buffer->second.size(); ++i) {
        Tensor& g = buffer->second[i].grad;
        const auto& m = node->outputs()[i];
        grad_outputs.push_back(g.defined() ? std::move(g) : Tensor::zeros(m.shape, m.dtype, m.device));
      }
      buffers.erase(buffer);
      grad_inputs = node->apply(std::move(grad_outputs));
    }
    if (!retain_graph) node->release_saved();
    // Every edge into a leaf's one sink has delivered: its gradient for this backward is in
    // grad(), also when all of it came through nested backwards (then the sink got no buffer).
    if (scope.outermost()) {
      if (const auto* sink = dynamic_cast<const AccumulateGrad*>(node)) run_grad_ready_hook(sink->leaf());
    }

    const auto& edges = node->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < grad_inputs.size() && grad_inputs[i].defined()) add_to_buffer(e.node, e.output_nr, grad_inputs[i]);
      if (--deps[e.node.get()] == 0 && queued.insert(e.node.get()).second) {
        keep_alive.emplace(e.node.get(), e.node);
        ready.push(e.node.get());
      }
    }
  }
}

}  // namespace wf::autograd

namespace wf {
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}
}  // namespace wf
