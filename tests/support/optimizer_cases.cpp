// The optimizer's shared device cases (tests/support/optimizer_cases.h).
#include "support/optimizer_cases.h"

#include <cmath>
#include <limits>

#include "wallfacer/core/stream.h"

namespace wf::parity {

train::AdamWOptions adamw_options() { return {.lr = 0.05, .weight_decay = 0.1, .ema_decay = 0.9}; }

std::vector<Tensor> make_params(Device device) {
  std::vector<Tensor> params = {Tensor::randn_at({5, 7}, 11, 0, DType::f32), Tensor::randn_at({7}, 11, 100, DType::f32),
                                Tensor::randn_at({3, 4}, 11, 200, DType::f64),
                                Tensor::randn_at({6}, 11, 300, DType::f64)};
  for (Tensor& p : params) {
    p = p.to(device);
    p.set_requires_grad(true);
  }
  return params;
}

void set_grads(std::vector<Tensor>& params, int step, Device device, double scale) {
  for (std::size_t i = 0; i + 1 < params.size(); ++i) {  // the last one has none
    const Tensor g = Tensor::randn_at(params[i].shape(), 23 + step, 1000 * i, params[i].dtype());
    params[i].set_grad(g.to(device));
    train::scale_gradients({params[i]}, scale);
  }
}

ClippedStep clipped_step(std::vector<Tensor>& cpu, train::AdamW& cpu_opt, std::vector<Tensor>& dev,
                         train::AdamW& dev_opt, Device device, int step) {
  set_grads(cpu, step, Device::cpu());
  set_grads(dev, step, device);
  ClippedStep result;
  result.cpu_norm = train::clip_grad_norm(cpu, 1.0);
  const std::int64_t before = host_sync_count();
  result.device_norm = train::clip_grad_norm_on_device(dev, 1.0);
  dev_opt.step();
  result.device_host_syncs = host_sync_count() - before;
  cpu_opt.step();
  return result;
}

PoisonedClip poisoned_clip(Device device) {
  PoisonedClip r{.cpu = make_params(Device::cpu()), .dev = make_params(device)};
  set_grads(r.cpu, 0, Device::cpu(), std::numeric_limits<double>::infinity());
  set_grads(r.dev, 0, device, std::numeric_limits<double>::infinity());
  r.cpu_norm = train::clip_grad_norm(r.cpu, 1.0);
  const std::int64_t before = host_sync_count();
  r.device_norm = train::clip_grad_norm(r.dev, 1.0);
  r.device_host_syncs = host_sync_count() - before;
  return r;
}

std::vector<double> skip_scales() {
  return {std::numeric_limits<double>::infinity(), 3.0, std::numeric_limits<double>::quiet_NaN(), 0.5};
}

std::int64_t device_decided_step(std::vector<Tensor>& params, train::AdamW& opt, Device device, int step,
                                 double scale) {
  set_grads(params, step, device, scale);
  const std::int64_t before = host_sync_count();
  opt.step(train::clip_grad_norm_on_device(params, 1.0));
  return host_sync_count() - before;
}

void host_decided_step(std::vector<Tensor>& params, train::AdamW& opt, int step, double scale) {
  set_grads(params, step, Device::cpu(), scale);
  if (std::isfinite(train::clip_grad_norm(params, 1.0))) opt.step();
}

}  // namespace wf::parity
