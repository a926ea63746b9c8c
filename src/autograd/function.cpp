#include "wallfacer/autograd/function.h"

#include <unordered_set>

#include "wallfacer/autograd/grad_mode.h"

namespace wf::autograd {

// ---- Context ----------------------------------------------------------------------------
void Context::save_for_backward(TensorList tensors) { saved_ = std::move(tensors); }

const TensorList& Context::saved() const {
  WF_CHECK(!released_,
           "saved tensors were freed by an earlier backward pass; call backward(grad, /*retain_graph=*/true) "
           "to run backward through the same graph twice");
  return saved_;
}

bool Context::needs_input_grad(std::size_t input) const {
  return input < needs_input_grad_.size() && needs_input_grad_[input];
}

void Context::release() {
  saved_.clear();
  released_ = true;
}

// ---- the node a Function records ----------------------------------------------------------
namespace {

class FunctionNode final : public Node {
 public:
  FunctionNode(std::shared_ptr<Function> fn, std::unique_ptr<Context> ctx) : fn_(std::move(fn)), ctx_(std::move(ctx)) {}

  TensorList apply(TensorList grad_outputs) override {
    NoGradGuard no_grad;
    TensorList grads = fn_->backward(*ctx_, grad_outputs);
    WF_CHECK(grads.size() == ctx_->num_inputs(), "{}::backward returned {} gradients for {} inputs", fn_->name(),
             grads.size(), ctx_->num_inputs());
    grads.resize(next_edges().size());  // the recomputed leaves' edges carry none (their nested backward did)
    return grads;
  }
  std::string name() const override { return fn_->name(); }
  void release_saved() override { ctx_->release(); }

 private:
  std::shared_ptr<Function> fn_;
  std::unique_ptr<Context> ctx_;
};

class LambdaFunction final : public Function {
 public:
  LambdaFunction(std::string name, ForwardFn forward, BackwardFn backward)
      : name_(std::move(name)), forward_(std::move(forward)), backward_(std::move(backward)) {}
  TensorList forward(Context& ctx, const TensorList& inputs) override { return forward_(ctx, inputs); }
  TensorList backward(Context& ctx, const TensorList& grad_outputs) override { return backward_(ctx, grad_outputs); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  ForwardFn forward_;
  BackwardFn backward_;
};

// The leaves requiring grad that ops read while a recomputing Function's forward runs (see
// Function::recomputes_in_backward). One per recorded recomputing forward on this thread's
// stack; a recomputing forward that is not recorded itself (a checkpoint inside a checkpoint's
// forward, which runs with grad mode off) lets its ops land in the enclosing recorder.
class LeafRecorder {
 public:
  LeafRecorder() : parent_(current_) { current_ = this; }
  ~LeafRecorder() { current_ = parent_; }
  LeafRecorder(const LeafRecorder&) = delete;
  LeafRecorder& operator=(const LeafRecorder&) = delete;

  // Called for every op's inputs while a recorder is active, whatever the grad mode.
  static void note(const TensorList& inputs) {
    if (current_ == nullptr) return;
    for (const Tensor& t : inputs) {
      if (t.defined() && t.requires_grad() && t.grad_fn() == nullptr && current_->seen_.insert(t.impl_ptr().get()).second) {
        current_->leaves_.push_back(t);
      }
    }
  }
  // The recorded leaves, in first-use order; also handed to the enclosing recorder, whose
  // recompute reaches them too (it recomputes this one).
  TensorList finish() {
    if (parent_ != nullptr) note_into(*parent_);
    return std::move(leaves_);
  }

 private:
  void note_into(LeafRecorder& other) const {
    for (const Tensor& t : leaves_) {
      if (other.seen_.insert(t.impl_ptr().get()).second) other.leaves_.push_back(t);
    }
  }

  static thread_local LeafRecorder* current_;
  LeafRecorder* parent_;
  TensorList leaves_;
  std::unordered_set<const TensorImpl*> seen_;
};

thread_local LeafRecorder* LeafRecorder::current_ = nullptr;

}  // namespace

TensorList apply_function(std::shared_ptr<Function> fn, const TensorList& inputs) {
  LeafRecorder::note(inputs);
  bool record = false;
  if (grad_enabled()) {
    for (const auto& t : inputs) record = record || (t.defined() && t.requires_grad());
  }

  auto ctx = std::make_unique<Context>();
  std::vector<Edge> edges;
  std::vector<bool> needs;
  TensorList detached;
  detached.reserve(inputs.size());
  for (const auto& t : inputs) {
    detached.push_back(t.defined() ? t.detach() : Tensor());
    if (record) {
      edges.push_back(gradient_edge(t));
      needs.push_back(edges.back().valid());
    }
  }
  ctx->set_needs_input_grad(needs);

  TensorList outputs;
  {
    NoGradGuard no_grad;
    if (record && fn->recomputes_in_backward()) {
      LeafRecorder recorder;
      outputs = fn->forward(*ctx, detached);
      for (const Tensor& leaf : recorder.finish()) edges.push_back(gradient_edge(leaf));
    } else {
      outputs = fn->forward(*ctx, detached);
    }
  }
  if (!record) return outputs;

  // Outputs handed back are fresh handles on the forward's results: the node may have saved
  // the results themselves, and those must not point back at the node (a reference cycle).
  auto node = std::make_shared<FunctionNode>(fn, std::move(ctx));
  std::vector<OutputMeta> metas;
  TensorList results;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    WF_CHECK(out.defined(), "{}::forward returned an undefined output {}", fn->name(), i);
    metas.push_back({out.shape(), out.dtype(), out.device()});
    Tensor handle = out.detach();
    if (is_floating(out.dtype())) {
      auto& meta = handle.impl()->autograd_meta();
      meta.requires_grad = true;
      meta.grad_fn = node;
      meta.output_nr = static_cast<int>(i);
    }
    results.push_back(std::move(handle));
  }
  node->set_next_edges(std::move(edges));
  node->set_outputs(std::move(metas));
  return results;
}

TensorList apply_function(std::string name, const TensorList& inputs, ForwardFn forward, BackwardFn backward) {
  return apply_function(std::make_shared<LambdaFunction>(std::move(name), std::move(forward), std::move(backward)), inputs);
}

}  // namespace wf::autograd
