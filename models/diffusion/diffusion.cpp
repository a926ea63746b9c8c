#include "wallfacer/models/diffusion.h"

#include <algorithm>
#include <cmath>

#include "kernels/diffusion_schedule.h"
#include "src/ops/common.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

namespace wf::models {
namespace {

// Elements per sample of a [B, ...] tensor, after checking it has one time per sample.
std::int64_t per_sample_elements(const Tensor& x, std::size_t samples, const char* what) {
  WF_CHECK(x.dim() >= 1 && x.size(0) == static_cast<std::int64_t>(samples) && x.dtype() == DType::f32,
           "diffusion {}: expected an f32 [batch = {}, ...] tensor, got {} {}", what, samples, dtype_name(x.dtype()),
           shape_str(x.shape()));
  return x.size(0) == 0 ? 0 : x.numel() / x.size(0);
}

// x clamped to [−1, 1] elementwise in f32 (a copy, in x's dtype).
Tensor clamp_unit(const Tensor& x) {
  const Tensor x32 = x.to(DType::f32);
  const ops::Kernels k = ops::kernels_for("diffusion clamp", {x32});
  Tensor out = Tensor::empty(x32.shape(), DType::f32, k.device());
  k->clamp(k.stream, DType::f32, x32.numel(), -1.0, 1.0, x32.data<float>(), out.data<float>());
  return out.to(x.dtype());
}

// Host times as an f64 [batch] tensor on `device`.
Tensor times_on(const std::vector<double>& t, Device device) {
  return Tensor::from_vector(t, {static_cast<std::int64_t>(t.size())}).to(device);
}

// Times [samples] f64 on x's device, else an error naming `what` and the fix.
void check_times(const Tensor& times, const Tensor& x, const char* what) {
  WF_CHECK(times.defined() && times.dim() == 1 && times.dtype() == DType::f64 && times.device() == x.device(),
           "diffusion {}: times must be [batch] f64 on the data's device {} (one per sample), got {} {} on {}", what,
           x.device().str(), times.defined() ? dtype_name(times.dtype()) : "none",
           times.defined() ? shape_str(times.shape()) : "", times.defined() ? times.device().str() : "none");
}

}  // namespace

const char* diffusion_kind_name(DiffusionKind kind) { return kind == DiffusionKind::flow ? "flow" : "ddpm"; }

Diffusion::Diffusion(const DiffusionOptions& options) : options_(options) {
  const std::int64_t T = options.num_timesteps;
  WF_CHECK(T >= 2, "Diffusion: num_timesteps must be at least 2, got {}", T);
  WF_CHECK(0 < options.beta_start && options.beta_start <= options.beta_end && options.beta_end < 1,
           "Diffusion: betas must satisfy 0 < beta_start <= beta_end < 1, got {} and {}", options.beta_start,
           options.beta_end);
  WF_CHECK(!options.learn_sigma || options.kind == DiffusionKind::ddpm,
           "Diffusion: learn_sigma needs the ddpm process (flow predicts a velocity, not a variance)");
  const auto n = static_cast<std::size_t>(T);
  betas_.resize(n);
  alphas_cumprod_.resize(n);
  alphas_cumprod_prev_.resize(n);
  double product = 1.0;
  for (std::size_t t = 0; t < n; ++t) {
    // numpy.linspace(beta_start, beta_end, T), as DiT's get_beta_schedule("linear").
    betas_[t] = options.beta_start + (options.beta_end - options.beta_start) * static_cast<double>(t) /
                                         static_cast<double>(T - 1);
    alphas_cumprod_prev_[t] = product;
    product *= 1.0 - betas_[t];
    alphas_cumprod_[t] = product;
  }
  posterior_log_variance_clipped_.resize(n);
  posterior_mean_coef1_.resize(n);
  posterior_mean_coef2_.resize(n);
  std::vector<double> posterior_variance(n);
  for (std::size_t t = 0; t < n; ++t) {
    posterior_variance[t] = betas_[t] * (1.0 - alphas_cumprod_prev_[t]) / (1.0 - alphas_cumprod_[t]);
    posterior_mean_coef1_[t] = betas_[t] * std::sqrt(alphas_cumprod_prev_[t]) / (1.0 - alphas_cumprod_[t]);
    posterior_mean_coef2_[t] =
        (1.0 - alphas_cumprod_prev_[t]) * std::sqrt(1.0 - betas_[t]) / (1.0 - alphas_cumprod_[t]);
  }
  // β̃_0 = 0: the log is clipped to β̃_1 at t = 0, as DiT's posterior_log_variance_clipped.
  for (std::size_t t = 0; t < n; ++t) {
    posterior_log_variance_clipped_[t] = std::log(posterior_variance[t == 0 ? 1 : t]);
  }
  // The kernels' copy of the constants (kernels/diffusion_schedule.h), from the values above.
  std::vector<double> table(n * kernels::kScheduleColumns);
  for (std::size_t t = 0; t < n; ++t) {
    double* row = table.data() + t * kernels::kScheduleColumns;
    row[kernels::kSqrtAlphaBar] = std::sqrt(alphas_cumprod_[t]);
    row[kernels::kSqrtOneMinusAlphaBar] = std::sqrt(1.0 - alphas_cumprod_[t]);
    row[kernels::kSqrtRecipAlphaBar] = std::sqrt(1.0 / alphas_cumprod_[t]);
    row[kernels::kSqrtRecipAlphaBarM1] = std::sqrt(1.0 / alphas_cumprod_[t] - 1.0);
    row[kernels::kPosteriorMeanCoef1] = posterior_mean_coef1_[t];
    row[kernels::kPosteriorMeanCoef2] = posterior_mean_coef2_[t];
    row[kernels::kPosteriorLogVariance] = posterior_log_variance_clipped_[t];
    row[kernels::kLogBeta] = std::log(betas_[t]);
  }
  schedule_ = Tensor::from_vector(table, {T, kernels::kScheduleColumns});
}

double Diffusion::time_from_uniform(double u) const {
  if (options_.kind == DiffusionKind::flow) return u;
  const auto T = static_cast<double>(options_.num_timesteps);
  return std::min(std::floor(u * T), T - 1);
}

double Diffusion::model_time(double t) const { return options_.kind == DiffusionKind::flow ? 1000.0 * t : t; }

Tensor Diffusion::model_times(const Tensor& times) const {
  return options_.kind == DiffusionKind::flow ? scale(times, 1000.0) : times;
}

std::pair<double, double> Diffusion::coefficients(double t) const {
  if (options_.kind == DiffusionKind::flow) return {1.0 - t, t};
  const auto step = static_cast<std::int64_t>(t);
  WF_CHECK(step == t && step >= 0 && step < options_.num_timesteps,
           "Diffusion: a ddpm time is an integer step in [0, {}), got {}", options_.num_timesteps, t);
  const double a = alphas_cumprod_[static_cast<std::size_t>(step)];
  return {std::sqrt(a), std::sqrt(1.0 - a)};
}

Tensor Diffusion::noised(const Tensor& x0, const Tensor& noise, const Tensor& times) const {
  check_times(times, x0, "noised");
  const std::int64_t m = per_sample_elements(x0, static_cast<std::size_t>(times.numel()), "noised");
  WF_CHECK(noise.shape() == x0.shape() && noise.dtype() == DType::f32, "diffusion noised: noise {} must match x0 {}",
           shape_str(noise.shape()), shape_str(x0.shape()));
  const Tensor schedule = schedule_.to(x0.device());
  const ops::Kernels k = ops::kernels_for("diffusion noised", {x0, noise, times, schedule});
  Tensor out = Tensor::empty(x0.shape(), DType::f32, k.device());
  k->diffusion_noise(k.stream, options_.kind == DiffusionKind::flow, times.numel(), m, options_.num_timesteps,
                     schedule.data<double>(), times.data<double>(), x0.data<float>(), noise.data<float>(),
                     out.data<float>());
  return out;
}

Tensor Diffusion::noised(const Tensor& x0, const Tensor& noise, const std::vector<double>& t) const {
  return noised(x0, noise, times_on(t, x0.device()));
}

Tensor Diffusion::target(const Tensor& x0, const Tensor& noise) const {
  autograd::NoGradGuard no_grad;
  return options_.kind == DiffusionKind::flow ? sub(noise, x0) : noise;
}

Tensor Diffusion::loss_sum(const Tensor& prediction, const Tensor& variance, const Tensor& target, const Tensor& x0,
                           const Tensor& x_t, const std::vector<double>& t) const {
  return loss_sum(prediction, variance, target, x0, x_t, times_on(t, prediction.device()));
}

Tensor Diffusion::loss_sum(const Tensor& prediction, const Tensor& variance, const Tensor& target, const Tensor& x0,
                           const Tensor& x_t, const Tensor& times) const {
  WF_CHECK(prediction.shape() == target.shape(), "diffusion loss: prediction {} and target {} must have one shape",
           shape_str(prediction.shape()), shape_str(target.shape()));
  const Tensor error = sub(prediction, target);
  Tensor loss = sum(mul(error, error));
  if (options_.learn_sigma) {
    WF_CHECK(variance.defined() && variance.shape() == prediction.shape() && x0.shape() == target.shape() &&
                 x_t.shape() == target.shape(),
             "diffusion loss: learn_sigma needs the variance output, x0 and x_t of prediction's shape {}; got {}, {} "
             "and {}",
             shape_str(prediction.shape()), variance.defined() ? shape_str(variance.shape()) : "none",
             x0.defined() ? shape_str(x0.shape()) : "none", x_t.defined() ? shape_str(x_t.shape()) : "none");
    loss = add(loss, vb_sum(variance, prediction.detach(), x0, x_t, times));
  }
  return loss;
}

Tensor Diffusion::vb_sum(const Tensor& variance, const Tensor& eps, const Tensor& x0, const Tensor& x_t,
                         const Tensor& times) const {
  check_times(times, x0, "vb");
  const std::int64_t m = per_sample_elements(x0, static_cast<std::size_t>(times.numel()), "vb");
  WF_CHECK(variance.numel() == x0.numel() && eps.numel() == x0.numel() && x_t.numel() == x0.numel() &&
               x_t.dtype() == DType::f32,
           "diffusion vb: variance {}, eps {} and x_t {} (f32) must match x0 {}", shape_str(variance.shape()),
           shape_str(eps.shape()), shape_str(x_t.shape()), shape_str(x0.shape()));
  // One pass computes every element's term and its derivative; backward scales the derivatives.
  auto d_v = std::make_shared<Tensor>();
  auto forward = [&, m, d_v](autograd::Context&, const autograd::TensorList& in) {
    const Tensor v = in[0].to(DType::f64), e = eps.to(DType::f64), schedule = schedule_.to(x0.device());
    const ops::Kernels k = ops::kernels_for("diffusion vb", {v, e, x0, x_t, times, schedule});
    Tensor derivative = Tensor::empty(in[0].shape(), DType::f64, k.device());
    Tensor total = Tensor::empty({}, DType::f64, k.device());
    k->diffusion_vb(k.stream, times.numel(), m, options_.num_timesteps, schedule.data<double>(),
                    times.data<double>(), v.data<double>(), e.data<double>(), x0.data<float>(), x_t.data<float>(),
                    derivative.data<double>(), total.data<double>());
    *d_v = derivative.to(in[0].dtype());
    return autograd::TensorList{total.to(in[0].dtype())};
  };
  auto backward = [d_v](autograd::Context&, const autograd::TensorList& grad) {
    return autograd::TensorList{mul(*d_v, grad[0])};
  };
  return autograd::apply_function("diffusion_vb", {variance}, forward, backward)[0];
}

Tensor Diffusion::sample(const Denoiser& model, const Tensor& noise, std::int64_t steps, bool clip_x0) const {
  WF_CHECK(steps >= 1, "Diffusion: sampling needs at least one step, got {}", steps);
  autograd::NoGradGuard no_grad;
  const auto batch = static_cast<std::size_t>(noise.size(0));
  Tensor x = noise;
  if (options_.kind == DiffusionKind::flow) {
    // Euler from t = 1 (noise) to t = 0: dx/dt = v, so x_{t−h} = x_t − h·v.
    const double h = 1.0 / static_cast<double>(steps);
    for (std::int64_t i = 0; i < steps; ++i) {
      const double t = 1.0 - static_cast<double>(i) * h;
      x = sub(x, scale(model(x, std::vector<double>(batch, model_time(t))), h));
    }
    return x;
  }
  const std::int64_t T = options_.num_timesteps;
  WF_CHECK(steps <= T, "Diffusion: DDIM takes at most num_timesteps = {} steps, got {}", T, steps);
  // Timesteps ⌊i·T/steps⌋, as DiT's space_timesteps("ddimN") when steps divides T.
  std::vector<std::int64_t> times;
  for (std::int64_t i = 0; i < steps; ++i) times.push_back(i * T / steps);
  for (std::int64_t i = steps - 1; i >= 0; --i) {
    const std::int64_t t = times[static_cast<std::size_t>(i)];
    const double ab = alphas_cumprod_[static_cast<std::size_t>(t)];
    const double ab_prev = i > 0 ? alphas_cumprod_[static_cast<std::size_t>(times[static_cast<std::size_t>(i - 1)])] : 1.0;
    Tensor eps = model(x, std::vector<double>(batch, static_cast<double>(t)));
    // x̂₀ = (x_t − √(1−ᾱ)·ε)/√ᾱ;  x_prev = √ᾱ_prev·x̂₀ + √(1−ᾱ_prev)·ε.
    Tensor x0 = scale(sub(x, scale(eps, std::sqrt(1.0 - ab))), 1.0 / std::sqrt(ab));
    if (clip_x0) {
      x0 = clamp_unit(x0);
      eps = scale(sub(x, scale(x0, std::sqrt(ab))), 1.0 / std::sqrt(1.0 - ab));  // the ε of the clamped x̂₀
    }
    x = add(scale(x0, std::sqrt(ab_prev)), scale(eps, std::sqrt(1.0 - ab_prev)));
  }
  return x;
}

}  // namespace wf::models
