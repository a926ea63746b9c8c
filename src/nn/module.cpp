#include "wallfacer/nn/module.h"

#include "wallfacer/ops/shape_ops.h"

#include <fmt/format.h>

#include "wallfacer/nn/init.h"

namespace wf::nn {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Replaces the data behind `t` with a converted copy. The TensorImpl itself stays, so every
// handle to it (a layer's member, the autograd graph's AccumulateGrad) sees the new dtype.
void convert_in_place(const Tensor& t, DType dtype) {
  if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
  const Tensor converted = t.detach().to(dtype);
  TensorImpl* impl = t.impl();
  impl->storage = converted.impl()->storage;
  impl->offset = converted.storage_offset();
  impl->dtype = dtype;
  if (impl->autograd) impl->autograd->grad = Tensor();
}

std::string list_or_none(const std::vector<std::string>& items) {
  return items.empty() ? "none" : fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* kind) const {
  WF_CHECK(!name.empty(), "register_{}: the name must not be empty", kind);
  WF_CHECK(name.find('.') == std::string::npos,
           "register_{}: name '{}' contains '.', which separates path components; use another name", kind,
           name);
  auto taken = [&](const auto& entries) {
    for (const auto& entry : entries) {
      if (entry.first == name) return true;
    }
    return false;
  };
  WF_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_),
           "register_{}: name '{}' is already used by a parameter, buffer or child of this module", kind, name);
}

Tensor Module::register_parameter(std::string name, Tensor value) {
  WF_CHECK(value.defined(), "register_parameter: '{}' is an undefined tensor", name);
  ParameterShard whole = ParameterShard::replicated(value.shape());
  return register_parameter(std::move(name), std::move(value), std::move(whole));
}

Tensor Module::register_parameter(std::string name, Tensor value, ParameterShard shard) {
  check_new_name(name, "parameter");
  WF_CHECK(value.defined(), "register_parameter: '{}' is an undefined tensor", name);
  WF_CHECK(is_floating(value.dtype()), "register_parameter: '{}' has dtype {}; parameters must be floating point",
           name, dtype_name(value.dtype()));
  // A parameter is a leaf: strip any history the initial value carries.
  Tensor param = value.is_leaf() ? value : value.detach();
  WF_CHECK(shard.local_shape() == param.shape(),
           "register_parameter: '{}' has shape {} but its shard ({}) holds {}", name, shape_str(param.shape()),
           shard_str(shard), shape_str(shard.local_shape()));
  param.set_requires_grad(true);
  parameters_.emplace_back(std::move(name), param);
  parameter_shards_.push_back(std::move(shard));
  return param;
}

Tensor Module::register_buffer(std::string name, Tensor value) {
  check_new_name(name, "buffer");
  WF_CHECK(value.defined(), "register_buffer: '{}' is an undefined tensor", name);
  Tensor buffer = value.detach();
  buffers_.emplace_back(std::move(name), buffer);
  return buffer;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  WF_CHECK(module != nullptr, "register_module: '{}' is a null module", name);
  WF_CHECK(module.get() != this, "register_module: a module cannot be its own child ('{}')", name);
  module->train(training_);
  children_.emplace_back(std::move(name), std::move(module));
}

void Module::collect(const std::string& prefix, std::vector<NamedTensor>& out, bool params, bool buffers) const {
  if (params) {
    for (const auto& [name, t] : parameters_) out.emplace_back(join(prefix, name), t);
  }
  if (buffers) {
    for (const auto& [name, t] : buffers_) out.emplace_back(join(prefix, name), t);
  }
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), out, params, buffers);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", out, true, false);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", out, false, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(std::move(t));
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  out.reserve(children_.size());
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const auto& [name, child] : children_) {
    for (auto& [sub_name, sub] : child->named_modules()) out.emplace_back(join(name, sub_name), sub);
  }
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t total = 0;
  for (const auto& t : parameters()) total += t.numel();
  return total;
}

void Module::collect_shards(const std::string& prefix, std::vector<NamedShard>& out) const {
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    out.emplace_back(join(prefix, parameters_[i].first), parameter_shards_[i]);
  for (const auto& [name, child] : children_) child->collect_shards(join(prefix, name), out);
}

void Module::set_gradient_partial_over(const std::string& group) {
  for (auto& shard : parameter_shards_) shard.partial_gradient_group = group;
  for (const auto& [name, child] : children_) child->set_gradient_partial_over(group);
}

std::vector<NamedShard> Module::named_parameter_shards() const {
  std::vector<NamedShard> out;
  collect_shards("", out);
  return out;
}

std::vector<ParameterShard> Module::parameter_shards() const {
  std::vector<ParameterShard> out;
  for (auto& [name, shard] : named_parameter_shards()) out.push_back(std::move(shard));
  return out;
}

const ParameterShard& Module::parameter_shard(std::string_view name) const {
  // Walk the dotted path down the children; the last component names the parameter.
  const Module* module = this;
  std::string_view rest = name;
  for (std::size_t dot; module != nullptr && (dot = rest.find('.')) != std::string_view::npos;) {
    const std::string_view child = rest.substr(0, dot);
    const Module* next = nullptr;
    for (const auto& [child_name, c] : module->children_)
      if (child_name == child) next = c.get();
    module = next;
    rest = rest.substr(dot + 1);
  }
  if (module != nullptr) {
    for (std::size_t i = 0; i < module->parameters_.size(); ++i)
      if (module->parameters_[i].first == rest) return module->parameter_shards_[i];
  }
  WF_FAIL("parameter_shard: this module has no parameter '{}'", name);
}

StateDict Module::state_dict() const {
  // Per module: parameters, then buffers, then children (PyTorch's order).
  std::vector<NamedTensor> entries;
  collect("", entries, true, true);
  StateDict state;
  for (auto& [name, t] : entries) state.insert(std::move(name), t.detach());
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : own) {
    const Tensor* source = state.find(name);
    if (source == nullptr) {
      missing.push_back(name);
      continue;
    }
    if (source->shape() != target.shape()) {
      mismatched.push_back(fmt::format("'{}' has shape {} in the state dict but {} in the module", name,
                                       shape_str(source->shape()), shape_str(target.shape())));
    } else if (strict && source->dtype() != target.dtype()) {
      mismatched.push_back(fmt::format("'{}' has dtype {} in the state dict but {} in the module", name,
                                       dtype_name(source->dtype()), dtype_name(target.dtype())));
    }
  }
  for (const auto& [name, source] : state) {
    if (!own.contains(name)) unexpected.push_back(name);
  }
  const bool key_errors = strict && (!missing.empty() || !unexpected.empty());
  if (key_errors || !mismatched.empty()) {
    std::string message = "load_state_dict failed:";
    if (strict) {
      message += fmt::format(" missing keys ({}): {};", missing.size(), list_or_none(missing));
      message += fmt::format(" unexpected keys ({}): {};", unexpected.size(), list_or_none(unexpected));
    }
    message += fmt::format(" mismatches ({}): {}.", mismatched.size(), list_or_none(mismatched));
    message += strict ? " Load with strict=false to skip missing and unexpected keys and convert dtypes."
                      : " Shapes must match; build the module with the checkpoint's sizes.";
    WF_FAIL("{}", message);
  }
  for (const auto& [name, target] : own) {
    if (const Tensor* source = state.find(name)) {
      Tensor destination = target;
      destination.copy_(*source);
    }
  }
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.set_grad(Tensor());
}

Module& Module::to(DType dtype) {
  WF_CHECK(is_floating(dtype), "Module::to: {} is not a floating dtype; parameters must stay floating point",
           dtype_name(dtype));
  for (const auto& [name, t] : named_parameters()) convert_in_place(t, dtype);
  for (const auto& [name, t] : named_buffers()) convert_in_place(t, dtype);
  return *this;
}

void Module::set_compute_dtype(DType dtype) {
  WF_CHECK(is_floating(dtype), "Module::set_compute_dtype: {} is not a floating dtype", dtype_name(dtype));
  has_compute_dtype_ = true;
  compute_dtype_ = dtype;
  for (const auto& [name, child] : children_) child->set_compute_dtype(dtype);
}

Tensor Module::in_compute_dtype(const Tensor& t) const {
  if (!has_compute_dtype_ || !t.defined() || t.dtype() == compute_dtype_) return t;
  return cast(t, compute_dtype_);
}

std::uint64_t Module::child_seed(std::string_view name) const { return derive_seed(seed_, name); }

Tensor Module::init_normal(std::string_view name, const Shape& shape, double std) const {
  return normal_init(shape, derive_seed(seed_, name), std);
}

Module& ModuleList::operator[](std::size_t i) const {
  WF_CHECK(i < size(), "ModuleList: index {} out of range for a list of {} modules", i, size());
  return *named_children()[i].second;
}

}  // namespace wf::nn
