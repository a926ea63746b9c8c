#pragma once
// The backward graph. Every differentiable op that runs with grad mode on creates one Node;
// its next edges point at the nodes that produced its inputs (or at the AccumulateGrad of a
// leaf). The engine (engine.h) walks nodes in topological order.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::autograd {

using TensorList = std::vector<Tensor>;
class Node;

// Where the gradient of one input goes: input `input_nr`'s producer `node`, output slot
// `output_nr` of it. An edge without a node means "this input needs no gradient".
struct Edge {
  std::shared_ptr<Node> node;
  int output_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Shape and dtype of an output, so an output that received no gradient can be given zeros.
struct OutputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients of the inputs (one per next edge; undefined = no gradient) from the gradients of
  // the outputs (one per output; undefined ones are materialised as zeros before the call).
  virtual TensorList apply(TensorList grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors once the engine no longer needs this node (unless retain_graph).
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  const std::vector<OutputMeta>& outputs() const { return outputs_; }
  void set_outputs(std::vector<OutputMeta> outputs) { outputs_ = std::move(outputs); }
  // Creation order: among ready nodes the engine runs the newest first, like a stack unwinding.
  std::uint64_t sequence_nr() const { return sequence_nr_; }

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
  std::uint64_t sequence_nr_;
};

// Sink of a leaf that requires grad: adds the incoming gradient into leaf.grad(). A leaf has
// one while any recorded graph uses it, shared by all its uses (gradient_edge), so the engine
// runs it once per backward with the sum of every use.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  TensorList apply(TensorList grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge through which a gradient for `t` must flow (invalid when t needs none): its grad_fn
// for a non-leaf; for a leaf its AccumulateGrad, the same node for every call while a graph
// holds it (AutogradMeta::grad_accumulator), a new one once none does.
Edge gradient_edge(const Tensor& t);

// dst += src elementwise (same shape; dst's dtype). Used for gradient accumulation.
void accumulate_into(Tensor& dst, const Tensor& src);

}  // namespace wf::autograd
