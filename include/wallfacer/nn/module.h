#pragma once
// wf::nn::Module: the base of every layer and model. It owns named parameters (leaf tensors
// that require grad), named buffers (state that is saved but not trained) and named child
// modules, and walks them in a fixed order: a module's own entries in registration order,
// then each child depth-first, in registration order. Names are dotted paths
// ("blocks.0.attn.qkv.weight"), the same as PyTorch's, so state dicts map one to one.
//
// A layer registers what it owns in its constructor and keeps the returned handles:
//
//   struct Scale : wf::nn::Module {
//     explicit Scale(std::int64_t dim, std::uint64_t seed) : Module(seed) {
//       weight_ = register_parameter("weight", Tensor::ones({dim}));
//     }
//     Tensor forward(const Tensor& x) { return wf::mul(x, weight_); }
//     Tensor weight_;
//   };
//
// Initial values are drawn from the module's seed (init.h), never from a global generator,
// so the same seed always gives the same weights whatever the construction order.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/parameter_shard.h"
#include "wallfacer/nn/precision.h"
#include "wallfacer/nn/state_dict.h"

namespace wf::nn {

using NamedTensor = std::pair<std::string, Tensor>;
using NamedShard = std::pair<std::string, ParameterShard>;

class Module {
 public:
  explicit Module(std::uint64_t seed = 0) : seed_(seed) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (names: non-empty, no '.', unique within this module) -----------------
  // Makes `value` a parameter: a leaf that requires grad. Returns the handle the layer keeps;
  // it shares its TensorImpl with the registered entry, so to() and load_state_dict() are seen
  // through it.
  Tensor register_parameter(std::string name, Tensor value);
  // The same for a parameter of which this rank holds one slice (tensor parallelism): `shard`
  // says which, and its local_shape() must be value's shape. The form above registers a whole
  // (replicated) parameter.
  Tensor register_parameter(std::string name, Tensor value, ParameterShard shard);
  Tensor register_buffer(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

  // ---- traversal ------------------------------------------------------------------------
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module ("") and every descendant, depth-first; pointers live as long as this module.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::int64_t num_parameters() const;  // total elements (this rank's: shards count their slice)
  // Where each parameter sits in its whole tensor, in named_parameters() order; and one by its
  // dotted name (wf::Error naming it when there is no such parameter).
  std::vector<NamedShard> named_parameter_shards() const;
  // The same without the names: shards[i] describes parameters()[i].
  std::vector<ParameterShard> parameter_shards() const;
  const ParameterShard& parameter_shard(std::string_view name) const;
  // Marks every parameter of this module and its descendants as having a gradient that is
  // partial over `group` (ParameterShard::partial_gradient_group): a factory that runs the
  // module on this rank's part of the tokens only says so once, where it builds it.
  void set_gradient_partial_over(const std::string& group);

  // ---- state ----------------------------------------------------------------------------
  // Parameters then buffers of each module, depth-first. The tensors share storage with the
  // module (no copy, no history): clone() them to keep a snapshot while training continues.
  StateDict state_dict() const;
  // Copies values in, after checking everything first (nothing is copied when a check fails).
  // strict: every key must match both ways and dtypes must be equal; the wf::Error lists ALL
  // missing keys, unexpected keys and dtype mismatches. Not strict: missing and unexpected keys
  // are skipped and values are converted to the module's dtype. Shape mismatches are errors
  // either way, listed by name with both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- mode and housekeeping -------------------------------------------------------------
  void train(bool on = true);  // this module and all descendants
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();  // drops every parameter's grad (undefined, not zeros)
  // Converts floating parameters and buffers in place (integer buffers stay as they are) and
  // drops their grads. Handles held by layers stay valid; an optimizer made earlier does not:
  // convert first, then build the optimizer.
  Module& to(DType dtype);

  // ---- mixed precision (nn/precision.h) ---------------------------------------------------
  // The dtype this module and every descendant compute in: their parameters stay as they are
  // (the f32 masters) and forward() uses them cast to it; activations leave the layers in it.
  // Unset (the default) computes in each parameter's own dtype.
  void set_compute_dtype(DType dtype);
  // The compute dtype, or `fallback` when none is set.
  DType compute_dtype(DType fallback) const { return has_compute_dtype_ ? compute_dtype_ : fallback; }

  // ---- seeds ----------------------------------------------------------------------------
  std::uint64_t seed() const { return seed_; }
  // The seed a child registered as `name` should be built with.
  std::uint64_t child_seed(std::string_view name) const;
  // normal(0, std²) drawn from this module's stream for parameter `name` (see init.h).
  Tensor init_normal(std::string_view name, const Shape& shape, double std) const;

 protected:
  // A tensor as this module computes with it: itself, or its differentiable cast to the compute
  // dtype (the gradient comes back widened to the tensor's own dtype). Layers pass their
  // parameters through it in forward(); an undefined tensor passes through.
  Tensor in_compute_dtype(const Tensor& t) const;

 private:
  void add_child(std::string name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* kind) const;
  void collect(const std::string& prefix, std::vector<NamedTensor>& out, bool params, bool buffers) const;
  void collect_shards(const std::string& prefix, std::vector<NamedShard>& out) const;  // collect()'s order

  std::uint64_t seed_;
  bool training_ = true;
  bool has_compute_dtype_ = false;
  DType compute_dtype_ = DType::f32;
  std::vector<NamedTensor> parameters_;
  std::vector<ParameterShard> parameter_shards_;  // parameter_shards_[i] describes parameters_[i]
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// An ordered list of child modules named "0", "1", ... (PyTorch's nn.ModuleList).
class ModuleList : public Module {
 public:
  explicit ModuleList(std::uint64_t seed = 0) : Module(seed) {}

  // The seed the next appended module should be built with (child_seed of its index).
  std::uint64_t next_seed() const { return seed_at(static_cast<std::int64_t>(size())); }
  template <class M>
  std::shared_ptr<M> append(std::shared_ptr<M> module) {
    return register_module(std::to_string(size()), std::move(module));
  }
  // A list that holds part of a longer one (a pipeline stage's blocks [i, j)) places each child
  // under its index in the whole list: the name ("blocks.7...") and the seed (seed_at(7)) are
  // those of the whole model's child, so a stage's weights are bit for bit the matching part
  // of the whole model. Indices must be new; they need not start at 0 or be contiguous.
  std::uint64_t seed_at(std::int64_t index) const { return child_seed(std::to_string(index)); }
  template <class M>
  std::shared_ptr<M> place(std::int64_t index, std::shared_ptr<M> module) {
    return register_module(std::to_string(index), std::move(module));
  }
  std::size_t size() const { return named_children().size(); }
  Module& operator[](std::size_t i) const;
};

}  // namespace wf::nn
