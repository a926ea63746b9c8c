#pragma once
// AdamW (decoupled weight decay, PyTorch's torch.optim.AdamW update) and gradient-norm
// clipping, over f32 or f64 parameters on any device: the arithmetic runs in the kernels of the
// parameters' device (kernels/backend.h), and the step reads nothing back on the host.
//
// Weight decay: by default it applies to parameters with 2 or more dims (matrices, embeddings)
// and NOT to 1-D parameters (biases, norm weights), the usual GPT recipe. set_weight_decay
// overrides it per parameter.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/parameter_shard.h"
#include "wallfacer/nn/state_dict.h"

namespace wf::train {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // > 0: keep an exponential moving average of every parameter, updated after each step,
  // ema = d·ema + (1 − d)·param, starting from the parameter's value before its first update
  // (DiT samples with the EMA weights). Kept per parameter piece like the moments, so ZeRO shards
  // it and checkpoints hold it as "<parameter>.ema".
  double ema_decay = 0.0;
  // The decay of each update: ema_decay_at(ema_decay, earlier updates, ema_warmup). With the
  // warm-up a short run's EMA follows the weights instead of staying at their initial values.
  bool ema_warmup = true;
};

// The EMA decay of a parameter's update that follows `earlier` updates: with the warm-up
// min(decay, (1 + earlier) / (10 + earlier)) — TensorFlow's ExponentialMovingAverage with
// num_updates, diffusers' EMAModel without use_ema_warmup: 0.1 at the first update, past 0.99
// after 890 — and `decay` throughout without.
double ema_decay_at(double decay, std::int64_t earlier, bool warmup);
// The weight an EMA still gives the parameter's initial value after `updates` updates: the
// product of their decays. 1 − this is the share of the EMA the training has written.
double ema_initial_weight(double decay, std::int64_t updates, bool warmup);

// The fields of AdamW's state per parameter, under these names in state dicts and checkpoints:
// "step", "exp_avg" and "exp_avg_sq" once the parameter has been updated, and "ema" with
// ema_decay > 0 (optional: a state without it is complete).
inline constexpr std::array<std::string_view, 4> kAdamWStateFields = {"step", "exp_avg", "exp_avg_sq", "ema"};
inline bool adamw_field_required(std::string_view field) { return field != "ema"; }
// The fields every updated parameter's state holds: "step", "exp_avg", "exp_avg_sq".
std::vector<std::string_view> adamw_required_fields();

class AdamW {
 public:
  // params: leaf tensors (e.g. module.parameters()), updated in place by step().
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});

  // One update of every parameter whose grad is defined; the others (and their step counts)
  // are left alone. Runs without recording a graph.
  void step();
  // The same only when `grad_norm` (an f64 scalar on the parameters' device: the norm
  // clip_grad_norm_on_device gives) is finite; else nothing changes, the step counts included.
  // The decision is taken on the device (kernels/backend.h's adamw_update): the host reads nothing,
  // so a diverged step is skipped without a host synchronisation.
  void step(const Tensor& grad_norm);
  void zero_grad();  // grads become undefined

  void set_lr(double lr);
  double lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }

  std::size_t num_params() const { return params_.size(); }
  // The parameters it updates, in order (the shapes load_state_dict expects).
  const std::vector<Tensor>& params() const { return params_; }
  bool weight_decay_enabled(std::size_t param) const;
  void set_weight_decay(std::size_t param, bool enabled);
  // Updates parameter `param` has received (0 before its first). Kept on the device: this reads
  // it (one host synchronisation).
  std::int64_t step_count(std::size_t param) const;

  // Per parameter i that has been updated: "state.<i>.step" (i64 scalar), "state.<i>.exp_avg"
  // and "state.<i>.exp_avg_sq" (the parameter's shape and dtype), and "state.<i>.ema" when an
  // EMA is kept. Tensors are copies; the step counts are read to the host with one copy.
  nn::StateDict state_dict() const;
  // Replaces the whole state; wf::Error listing every unknown key, missing companion entry and
  // shape mismatch (nothing changes when a check fails).
  // A state without "ema" starts the EMA (with ema_decay > 0) from the parameter's value.
  void load_state_dict(const nn::StateDict& state);
  // The EMA of parameter `param`; undefined before its first update or without ema_decay.
  const Tensor& ema(std::size_t param) const;

 private:
  struct ParamState {
    Tensor exp_avg;     // undefined until the first step
    Tensor exp_avg_sq;
    Tensor ema;  // with ema_decay > 0
    // The updates applied: an i64 scalar on the parameter's device (steps skipped for a non-finite
    // norm do not count), defined with exp_avg. The bias correction's t is this + 1.
    Tensor applied;
    bool weight_decay = true;
  };
  // step() and step(grad_norm): a null norm always applies.
  void update(const Tensor* grad_norm);
  // Every parameter's applied count, read to the host with one copy (0 for those never stepped).
  std::vector<std::int64_t> applied_counts() const;
  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
  AdamWOptions options_;
};

// Scales the gradients of `params` (undefined grads are skipped) so that their global L2 norm
// is at most max_norm: grads *= min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.
// clip_grad_norm_. Returns the norm before clipping, accumulated in f64 in a fixed order.
// A non-finite norm makes the grads non-finite too (check the returned norm to skip a step).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same for a model whose parameters may be split over a tensor-parallel group: shards[i] is
// params[i]'s layout (nn::Module::named_parameter_shards). A parameter split over `tp` adds its
// shard's squares, summed over tp (each shard counted once); a replicated one adds its squares
// once in total (every tp rank holds the same). The norm is the single-process model's and the
// same on every tp rank, so all of them clip alike. wf::Error for a shard split over another
// number of ranks than tp has.
double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, double max_norm);
// The same under ZeRO: `params` are the pieces of those parameters this replica owns and
// `replicas` the group holding the other pieces (null: every replica holds all of them). Each
// piece is counted once: the squares are summed over tp (split parameters) and over `replicas`.
double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, comm::Group* replicas, double max_norm);
// The same over a pipeline: `stages` (the grid's pp group) holds the other stages' parameters,
// whose squares are summed over it too, and counted[i] = 0 leaves params[i] out of the norm while
// still clipping it (a copy of a parameter another stage counts: the last stage's tied embedding).
struct GradNormScope {
  comm::Group* replicas = nullptr;
  comm::Group* stages = nullptr;
  const std::vector<char>* counted = nullptr;  // null: every parameter counts
};
double clip_grad_norm(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                      comm::Group& tp, const GradNormScope& scope, double max_norm);
// The same without a host read: the norm is an f64 scalar on the gradients' device (the CPU's when
// no parameter has a gradient), the clipping coefficient is computed and applied there; pass it to
// AdamW::step(grad_norm) to skip a non-finite step on the device. The overloads above that return a
// double read that norm once (one host synchronisation). Gradients on different devices are an error.
Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm);
Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, const std::vector<nn::ParameterShard>& shards,
                                comm::Group& tp, const GradNormScope& scope, double max_norm);
// The key AdamW::state_dict() gives `field` of parameter `index` ("state.<index>.<field>"), and
// its inverse (false for any other key).
std::string adamw_state_key(std::size_t index, std::string_view field);
bool parse_adamw_state_key(std::string_view key, std::size_t& index, std::string& field);

// grads *= factor in place (undefined grads are skipped): the trainer's 1 / (global count)
// normalisation of summed losses, and clipping.
void scale_gradients(const std::vector<Tensor>& params, double factor);

}  // namespace wf::train
