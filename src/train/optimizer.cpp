#include "wallfacer/train/optimizer.h"

#include <algorithm>

#include <fmt/format.h>

#include <charconv>
#include <iterator>
#include <cmath>
#include <string>
#include <string_view>

#include "kernels/kernel_args.h"
#include "src/ops/common.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/shape_ops.h"
#include "wallfacer/train/device_placement.h"

namespace wf::train {
namespace {

void check_options(const AdamWOptions& o) {
  WF_CHECK(o.lr >= 0.0, "AdamW: lr must be >= 0, got {}", o.lr);
  WF_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0,
           "AdamW: betas must be in [0, 1), got beta1={} beta2={}", o.beta1, o.beta2);
  WF_CHECK(o.eps >= 0.0, "AdamW: eps must be >= 0, got {}", o.eps);
  WF_CHECK(o.weight_decay >= 0.0, "AdamW: weight_decay must be >= 0, got {}", o.weight_decay);
  WF_CHECK(o.ema_decay >= 0.0 && o.ema_decay < 1.0, "AdamW: ema_decay must be in [0, 1), got {}", o.ema_decay);
}

// The gradient of `param` in the parameter's dtype (a copy only when the dtypes differ).
Tensor grad_like_param(const Tensor& param, std::size_t index) {
  const Tensor grad = param.grad();
  WF_CHECK(grad.shape() == param.shape(), "AdamW: parameter {} has shape {} but its grad has shape {}", index,
           shape_str(param.shape()), shape_str(grad.shape()));
  return grad.to(param.dtype());
}


}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : params_(std::move(params)), options_(options) {
  check_options(options_);
  state_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    WF_CHECK(p.defined(), "AdamW: parameter {} is undefined", i);
    WF_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64,
             "AdamW: parameter {} (shape {}) is {}; AdamW updates f32 or f64 parameters (keep an f32 master copy)",
             i, shape_str(p.shape()), dtype_name(p.dtype()));
    for (std::size_t j = 0; j < i; ++j) {
      WF_CHECK(!params_[j].is_same(p), "AdamW: parameters {} and {} are the same tensor; pass each parameter once",
               j, i);
    }
    state_[i].weight_decay = p.dim() >= 2;
  }
}

void AdamW::step() { update(nullptr); }

void AdamW::step(const Tensor& grad_norm) {
  WF_CHECK(grad_norm.defined() && grad_norm.numel() == 1 && grad_norm.dtype() == DType::f64,
           "AdamW::step: the gradient norm must be one f64 value (clip_grad_norm_on_device's), got {} {}",
           grad_norm.defined() ? dtype_name(grad_norm.dtype()) : "an undefined tensor",
           grad_norm.defined() ? shape_str(grad_norm.shape()) : "");
  update(&grad_norm);
}

// The parameters' updates, one adamw_update_multi per group of parameters that can share a call (the
// same device, dtype and weight decay): a few launches per step on a GPU instead of one per
// parameter. Parameters are independent, so grouping them changes no bits.
void AdamW::update(const Tensor* grad_norm) {
  NoGradGuard no_grad;
  const kernels::EmaParams ema{.decay = options_.ema_decay, .warmup = options_.ema_warmup};
  struct Group {
    ops::Kernels k;
    DType dtype;
    bool weight_decay;
    std::vector<kernels::AdamWTensor> tensors;
  };
  std::vector<Group> groups;
  std::vector<Tensor> grads;  // the gradients in their parameters' dtype, alive until the launches
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& param = params_[i];
    if (!param.grad().defined()) continue;
    const Tensor& grad = grads.emplace_back(grad_like_param(param, i));
    const ops::Kernels k = grad_norm != nullptr ? ops::kernels_for("AdamW::step", {param, grad, *grad_norm})
                                                : ops::kernels_for("AdamW::step", {param, grad});
    ParamState& s = state_[i];
    if (!s.exp_avg.defined()) {
      s.exp_avg = Tensor::zeros(param.shape(), param.dtype(), k.device());
      s.exp_avg_sq = Tensor::zeros(param.shape(), param.dtype(), k.device());
      s.applied = Tensor::zeros({}, DType::i64, k.device());
    }
    // The value before the first update (a skipped step leaves the parameter as it is).
    if (options_.ema_decay > 0 && !s.ema.defined()) s.ema = param.clone();
    const auto same = [&](const Group& g) {
      return g.k.device() == k.device() && g.dtype == param.dtype() && g.weight_decay == s.weight_decay;
    };
    auto group = std::find_if(groups.begin(), groups.end(), same);
    if (group == groups.end()) {
      groups.push_back(Group{k, param.dtype(), s.weight_decay, {}});
      group = std::prev(groups.end());
    }
    group->tensors.push_back({.n = param.numel(),
                              .param = param.raw_data(),
                              .grad = grad.raw_data(),
                              .exp_avg = s.exp_avg.raw_data(),
                              .exp_avg_sq = s.exp_avg_sq.raw_data(),
                              .ema = options_.ema_decay > 0 ? s.ema.raw_data() : nullptr,
                              .applied = s.applied.data<std::int64_t>()});
  }
  for (const Group& g : groups) {
    const kernels::AdamWParams hyper{.lr = options_.lr,
                                     .beta1 = options_.beta1,
                                     .beta2 = options_.beta2,
                                     .eps = options_.eps,
                                     .weight_decay = g.weight_decay ? options_.weight_decay : 0.0};
    g.k->adamw_update_multi(g.k.stream, g.dtype, g.tensors, hyper, ema,
                            grad_norm != nullptr ? grad_norm->data<double>() : nullptr);
  }
}

double ema_decay_at(double decay, std::int64_t earlier, bool warmup) {
  return kernels::ema_decay_at(decay, earlier, warmup);
}

double ema_initial_weight(double decay, std::int64_t updates, bool warmup) {
  double weight = 1.0;
  for (std::int64_t earlier = 0; earlier < updates && weight > 0; ++earlier) {
    weight *= ema_decay_at(decay, earlier, warmup);
  }
  return weight;
}

void AdamW::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

void AdamW::set_lr(double lr) {
  WF_CHECK(lr >= 0.0 && std::isfinite(lr), "AdamW::set_lr: lr must be finite and >= 0, got {}", lr);
  options_.lr = lr;
}

bool AdamW::weight_decay_enabled(std::size_t param) const {
  WF_CHECK(param < params_.size(), "AdamW: parameter index {} out of range ({} parameters)", param, params_.size());
  return state_[param].weight_decay;
}

void AdamW::set_weight_decay(std::size_t param, bool enabled) {
  WF_CHECK(param < params_.size(), "AdamW: parameter index {} out of range ({} parameters)", param, params_.size());
  state_[param].weight_decay = enabled;
}

std::int64_t AdamW::step_count(std::size_t param) const {
  WF_CHECK(param < params_.size(), "AdamW: parameter index {} out of range ({} parameters)", param, params_.size());
  const Tensor& applied = state_[param].applied;
  return applied.defined() ? read_to_host(applied).data<std::int64_t>()[0] : 0;
}

std::vector<std::int64_t> AdamW::applied_counts() const {
  std::vector<std::int64_t> counts(state_.size(), 0);
  std::vector<Tensor> defined;
  for (const ParamState& s : state_) {
    if (s.applied.defined()) defined.push_back(reshape(s.applied, {1}));
  }
  if (defined.empty()) return counts;
  const Tensor host = read_to_host(defined.size() == 1 ? defined.front() : cat(defined, 0));
  const std::int64_t* read = host.data<std::int64_t>();
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].applied.defined()) counts[i] = *read++;
  }
  return counts;
}

const Tensor& AdamW::ema(std::size_t param) const {
  WF_CHECK(param < params_.size(), "AdamW: parameter index {} out of range ({} parameters)", param, params_.size());
  return state_[param].ema;
}

nn::StateDict AdamW::state_dict() const {
  nn::StateDict out;
  const std::vector<std::int64_t> steps = applied_counts();
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (steps[i] == 0) continue;  // never updated (every step so far skipped, or none taken)
    out.insert(adamw_state_key(i, "step"), Tensor::scalar(static_cast<double>(steps[i]), DType::i64));
    out.insert(adamw_state_key(i, "exp_avg"), s.exp_avg.clone());
    out.insert(adamw_state_key(i, "exp_avg_sq"), s.exp_avg_sq.clone());
    if (s.ema.defined()) out.insert(adamw_state_key(i, "ema"), s.ema.clone());
  }
  return out;
}

void AdamW::load_state_dict(const nn::StateDict& state) {
  std::vector<std::string> problems;
  std::vector<bool> present(params_.size(), false);
  for (const auto& [key, tensor] : state) {
    std::size_t index = 0;
    std::string field;
    if (!parse_adamw_state_key(key, index, field) || index >= params_.size()) {
      problems.push_back(fmt::format("unexpected key '{}'", key));
      continue;
    }
    present[index] = true;
    if (field == "step") {
      if (tensor.numel() != 1 || is_floating(tensor.dtype()) || tensor.item() < 1) {
        problems.push_back(fmt::format("'{}' must be one integer >= 1", key));
      }
    } else if (tensor.shape() != params_[index].shape()) {
      problems.push_back(fmt::format("'{}' has shape {} but parameter {} has shape {}", key,
                                     shape_str(tensor.shape()), index, shape_str(params_[index].shape())));
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!present[i]) continue;
    for (const std::string_view field : adamw_required_fields()) {
      const std::string key = adamw_state_key(i, field);
      if (!state.contains(key)) problems.push_back(fmt::format("missing key '{}'", key));
    }
  }
  WF_CHECK(problems.empty(), "AdamW::load_state_dict: {} problem(s): {}. Was the state saved for these parameters, "
           "in this order?", problems.size(), fmt::join(problems, "; "));

  for (std::size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = state_[i];
    if (!present[i]) {
      s.exp_avg = s.exp_avg_sq = s.ema = s.applied = Tensor();
      continue;
    }
    // The count and the moments live where their parameter does (a checkpoint loads on the host).
    s.applied = Tensor::full({}, state.at(adamw_state_key(i, "step")).item(), DType::i64, params_[i].device());
    const auto like_param = [&](const Tensor& t) { return t.to(params_[i].dtype()).to(params_[i].device()).clone(); };
    s.exp_avg = like_param(state.at(adamw_state_key(i, "exp_avg")));
    s.exp_avg_sq = like_param(state.at(adamw_state_key(i, "exp_avg_sq")));
    const std::string ema_key = adamw_state_key(i, "ema");
    s.ema = state.contains(ema_key) ? like_param(state.at(ema_key))
            : options_.ema_decay > 0 ? params_[i].detach().clone()
                                     : Tensor();
  }
}

namespace {

constexpr const char* kClip = "clip_grad_norm";

// The kernels of the device holding the defined gradients of `params` (the CPU's when none is);
// gradients on different devices are an error naming both.
ops::Kernels gradient_kernels(std::string_view who, const std::vector<Tensor>& params) {
  Tensor first;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!first.defined()) {
      first = g;
    } else {
      ops::kernels_for(who, {first, g});
    }
  }
  return ops::kernels_for(who, {first});
}

// sums[slot[i]] += Σ g² of params[i]'s gradient (f64, on the device, in parameter order);
// parameters without a gradient or with slot[i] < 0 add nothing. One sum_of_squares_multi per slot
// (per run of one gradient dtype, in the rare model that mixes them: the adds keep their order).
void add_squares(const ops::Kernels& k, const std::vector<Tensor>& params, const std::vector<int>& slot,
                 Tensor& sums) {
  Tensor squares = Tensor::empty({static_cast<std::int64_t>(params.size())}, DType::f64, k.device());
  double* sq = squares.data<double>();
  double* s = sums.data<double>();
  for (int target = 0; target < static_cast<int>(sums.numel()); ++target) {
    std::vector<kernels::TensorSpan> run;
    DType run_dtype = DType::f32;
    const auto flush = [&] {
      if (run.empty()) return;
      k->sum_of_squares_multi(k.stream, run_dtype, run, sq, s + target);
      sq += run.size();
      run.clear();
    };
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor g = params[i].grad();
      if (!g.defined() || slot[i] != target) continue;
      if (!run.empty() && g.dtype() != run_dtype) flush();
      run_dtype = g.dtype();
      run.push_back({.data = g.raw_data(), .n = g.numel()});
    }
    flush();
  }
}

// The norm sqrt(Σ sums) as an f64 scalar on the device, and every gradient scaled by
// clip_coefficient(norm, max_norm) there unless that is >= 1: nothing is read on the host.
Tensor clip_to(const ops::Kernels& k, const std::vector<Tensor>& params, const Tensor& sums, double max_norm) {
  Tensor norm = Tensor::empty({}, DType::f64, k.device()), coefficient = Tensor::empty({}, DType::f64, k.device());
  k->clip_coefficient(k.stream, sums.numel(), sums.data<double>(), max_norm, norm.data<double>(),
                      coefficient.data<double>());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    k->scale_by_coefficient(k.stream, g.dtype(), g.numel(), g.raw_data(), coefficient.data<double>());
  }
  return norm;
}

void check_max_norm(double max_norm) {
  WF_CHECK(max_norm >= 0.0, "clip_grad_norm: max_norm must be >= 0, got {}", max_norm);
}

// The one host read of a clipping: the norm, for the caller's skip decision and log.
// (The copy to the host is the synchronisation; item() would count a second one on the CPU.)
double read_norm(const Tensor& norm) {
  if (!norm.device().is_cpu()) return *norm.to(Device::cpu()).data<double>();
  return norm.item();
}

}  // namespace

Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm) {
  check_max_norm(max_norm);
  const ops::Kernels k = gradient_kernels(kClip, params);
  Tensor sums = Tensor::zeros({1}, DType::f64, k.device());
  add_squares(k, params, std::vector<int>(params.size(), 0), sums);
  return clip_to(k, params, sums, max_norm);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return read_norm(clip_grad_norm_on_device(params, max_norm));
}

double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, double max_norm) {
  return clip_grad_norm(params, shards, tp, nullptr, max_norm);
}

double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, comm::Group* replicas, double max_norm) {
  return clip_grad_norm(params, shards, tp, GradNormScope{.replicas = replicas}, max_norm);
}

double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, const GradNormScope& scope, double max_norm) {
  return read_norm(clip_grad_norm_on_device(params, shards, tp, scope, max_norm));
}

Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                                comm::Group& tp, const GradNormScope& scope, double max_norm) {
  WF_CHECK(shards.size() == params.size(), "clip_grad_norm: {} shard descriptions for {} parameters",
           shards.size(), params.size());
  WF_CHECK(scope.counted == nullptr || scope.counted->size() == params.size(),
           "clip_grad_norm: {} counted flags for {} parameters", scope.counted ? scope.counted->size() : 0,
           params.size());
  check_max_norm(max_norm);
  // [0]: the split parameters' squares (summed over tp), [1]: the replicated ones' (counted once).
  std::vector<int> slot(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const bool split = shards[i].is_sharded();
    WF_CHECK(!split || (shards[i].parts == tp.size() && shards[i].group == tp.name()),
             "clip_grad_norm: parameter {} is split ({}), but not over the tensor-parallel group '{}' of {} ranks", i,
             nn::shard_str(shards[i]), tp.name(), tp.size());
    slot[i] = scope.counted != nullptr && (*scope.counted)[i] == 0 ? -1 : split ? 0 : 1;
  }
  const ops::Kernels k = gradient_kernels(kClip, params);
  Tensor sums = Tensor::zeros({2}, DType::f64, k.device());
  add_squares(k, params, slot, sums);
  Tensor split_sum = sums.slice0(0, 1);  // a view: the tp sum lands in `sums`
  if (tp.size() > 1) tp.all_reduce(split_sum);
  // ZeRO: the other pieces of every parameter are the other replicas'.
  if (scope.replicas != nullptr && scope.replicas->size() > 1) scope.replicas->all_reduce(sums);
  // Pipeline: the other parameters are the other stages'.
  if (scope.stages != nullptr && scope.stages->size() > 1) scope.stages->all_reduce(sums);
  return clip_to(k, params, sums, max_norm);
}

void scale_gradients(const std::vector<Tensor>& params, double factor) {
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const ops::Kernels k = ops::kernels_for("scale_gradients", {g});
    k->scale_inplace(k.stream, g.dtype(), g.numel(), g.raw_data(), factor);
  }
}

std::vector<std::string_view> adamw_required_fields() {
  std::vector<std::string_view> fields;
  std::copy_if(kAdamWStateFields.begin(), kAdamWStateFields.end(), std::back_inserter(fields), adamw_field_required);
  return fields;
}

std::string adamw_state_key(std::size_t index, std::string_view field) { return fmt::format("state.{}.{}", index, field); }

bool parse_adamw_state_key(std::string_view key, std::size_t& index, std::string& field) {
  constexpr std::string_view prefix = "state.";
  if (!key.starts_with(prefix)) return false;
  key.remove_prefix(prefix.size());
  const auto dot = key.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  const auto [end, error] = std::from_chars(key.data(), key.data() + dot, index);
  if (error != std::errc() || end != key.data() + dot) return false;
  field = std::string(key.substr(dot + 1));
  return std::find(kAdamWStateFields.begin(), kAdamWStateFields.end(), field) != kAdamWStateFields.end();
}

}  // namespace wf::train
