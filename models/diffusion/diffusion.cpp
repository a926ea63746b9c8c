#include "wallfacer/models/diffusion.h"

#include <algorithm>
#include <cmath>

#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

namespace wf::models {
namespace {

constexpr double kLn2 = 0.69314718055994530942;

// Elements per sample of a [B, ...] tensor, after checking it has one time per sample.
std::int64_t per_sample_elements(const Tensor& x, std::size_t samples, const char* what) {
  WF_CHECK(x.dim() >= 1 && x.size(0) == static_cast<std::int64_t>(samples) && x.dtype() == DType::f32,
           "diffusion {}: expected an f32 [batch = {}, ...] tensor, got {} {}", what, samples, dtype_name(x.dtype()),
           shape_str(x.shape()));
  return x.size(0) == 0 ? 0 : x.numel() / x.size(0);
}

// The tanh approximation of the standard normal CDF (DiT's approx_standard_normal_cdf) and its derivative.
double approx_cdf(double u) {
  return 0.5 * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}
double approx_cdf_derivative(double u) {
  const double th = std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u));
  return 0.5 * (1.0 - th * th) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * u * u);
}

// log(max(p, 1e-12)) and its derivative by p (zero where the clamp holds, as torch.clamp's).
std::pair<double, double> clamped_log(double p) {
  constexpr double kFloor = 1e-12;
  return p >= kFloor ? std::pair{std::log(p), 1.0 / p} : std::pair{std::log(kFloor), 0.0};
}

// x clamped to [−1, 1] elementwise (a copy).
Tensor clamp_unit(const Tensor& x) {
  Tensor out = x.to(DType::f32).clone();
  float* p = out.data<float>();
  for (std::int64_t i = 0; i < out.numel(); ++i) p[i] = std::clamp(p[i], -1.0f, 1.0f);
  return out.to(x.dtype());
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
}

double Diffusion::time_from_uniform(double u) const {
  if (options_.kind == DiffusionKind::flow) return u;
  const auto T = static_cast<double>(options_.num_timesteps);
  return std::min(std::floor(u * T), T - 1);
}

double Diffusion::model_time(double t) const { return options_.kind == DiffusionKind::flow ? 1000.0 * t : t; }

std::pair<double, double> Diffusion::coefficients(double t) const {
  if (options_.kind == DiffusionKind::flow) return {1.0 - t, t};
  const auto step = static_cast<std::int64_t>(t);
  WF_CHECK(step == t && step >= 0 && step < options_.num_timesteps,
           "Diffusion: a ddpm time is an integer step in [0, {}), got {}", options_.num_timesteps, t);
  const double a = alphas_cumprod_[static_cast<std::size_t>(step)];
  return {std::sqrt(a), std::sqrt(1.0 - a)};
}

Tensor Diffusion::noised(const Tensor& x0, const Tensor& noise, const std::vector<double>& t) const {
  const std::int64_t m = per_sample_elements(x0, t.size(), "noised");
  WF_CHECK(noise.shape() == x0.shape() && noise.dtype() == DType::f32, "diffusion noised: noise {} must match x0 {}",
           shape_str(noise.shape()), shape_str(x0.shape()));
  Tensor out = Tensor::empty(x0.shape(), DType::f32);
  for (std::size_t b = 0; b < t.size(); ++b) {
    const auto [a, s] = coefficients(t[b]);
    const float* x = x0.data<float>() + static_cast<std::int64_t>(b) * m;
    const float* e = noise.data<float>() + static_cast<std::int64_t>(b) * m;
    float* o = out.data<float>() + static_cast<std::int64_t>(b) * m;
    for (std::int64_t i = 0; i < m; ++i) o[i] = static_cast<float>(a * x[i] + s * e[i]);
  }
  return out;
}

Tensor Diffusion::target(const Tensor& x0, const Tensor& noise) const {
  autograd::NoGradGuard no_grad;
  return options_.kind == DiffusionKind::flow ? sub(noise, x0) : noise;
}

Tensor Diffusion::loss_sum(const Tensor& prediction, const Tensor& variance, const Tensor& target, const Tensor& x0,
                           const Tensor& x_t, const std::vector<double>& t) const {
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
    loss = add(loss, vb_sum(variance, prediction.detach(), x0, x_t, t));
  }
  return loss;
}

VbTerm vb_term(double v, double x0, double mean_true, double log_var_true, double mean_model, double max_log,
               double min_log, bool decoder) {
  const double frac = (v + 1.0) / 2.0;
  const double lv = frac * max_log + (1.0 - frac) * min_log;
  const double dlv_dv = (max_log - min_log) / 2.0;
  if (!decoder) {  // normal_kl(mean_true, log_var_true, mean_model, lv) / ln 2
    const double ratio = std::exp(log_var_true - lv), d = mean_true - mean_model, scaled = d * d * std::exp(-lv);
    const double kl = 0.5 * (-1.0 + lv - log_var_true + ratio + scaled);
    return {kl / kLn2, 0.5 * (1.0 - ratio - scaled) * dlv_dv / kLn2};
  }
  // −discretized_gaussian_log_likelihood(x0; mean_model, log_scale = lv/2) / ln 2. The inputs
  // scale as exp(−lv/2), so d(input)/d(lv) = −input/2.
  const double inv_std = std::exp(-0.5 * lv), centered = x0 - mean_model;
  const double plus_in = inv_std * (centered + 1.0 / 255.0), min_in = inv_std * (centered - 1.0 / 255.0);
  const double cdf_plus = approx_cdf(plus_in), cdf_min = approx_cdf(min_in);
  const double d_cdf_plus = approx_cdf_derivative(plus_in) * (-0.5 * plus_in);
  const double d_cdf_min = approx_cdf_derivative(min_in) * (-0.5 * min_in);
  double log_prob = 0, d_log_prob = 0;
  if (x0 < -0.999) {
    const auto [l, dl] = clamped_log(cdf_plus);
    log_prob = l, d_log_prob = dl * d_cdf_plus;
  } else if (x0 > 0.999) {
    const auto [l, dl] = clamped_log(1.0 - cdf_min);
    log_prob = l, d_log_prob = -dl * d_cdf_min;
  } else {
    const auto [l, dl] = clamped_log(cdf_plus - cdf_min);
    log_prob = l, d_log_prob = dl * (d_cdf_plus - d_cdf_min);
  }
  return {-log_prob / kLn2, -d_log_prob * dlv_dv / kLn2};
}

Tensor Diffusion::vb_sum(const Tensor& variance, const Tensor& eps, const Tensor& x0, const Tensor& x_t,
                         const std::vector<double>& t) const {
  const std::int64_t m = per_sample_elements(x0, t.size(), "vb");
  WF_CHECK(variance.numel() == x0.numel() && eps.numel() == x0.numel() && x_t.numel() == x0.numel(),
           "diffusion vb: variance {}, eps {} and x_t {} must match x0 {}", shape_str(variance.shape()),
           shape_str(eps.shape()), shape_str(x_t.shape()), shape_str(x0.shape()));
  // One pass computes every element's term and its derivative; backward scales the derivatives.
  auto d_v = std::make_shared<Tensor>();
  auto forward = [&, m, d_v](autograd::Context&, const autograd::TensorList& in) {
    const std::vector<double> v = in[0].to_vector<double>(), e = eps.to_vector<double>();
    std::vector<double> derivative(v.size());
    double total = 0;
    for (std::size_t b = 0; b < t.size(); ++b) {
      const auto step = static_cast<std::size_t>(t[b]);
      WF_CHECK(static_cast<double>(step) == t[b] && t[b] >= 0 && t[b] < static_cast<double>(betas_.size()),
               "diffusion vb: time {} is not a ddpm step", t[b]);
      const double recip = std::sqrt(1.0 / alphas_cumprod_[step]), recip_m1 = std::sqrt(1.0 / alphas_cumprod_[step] - 1.0);
      const double c1 = posterior_mean_coef1_[step], c2 = posterior_mean_coef2_[step];
      const double min_log = posterior_log_variance_clipped_[step], max_log = std::log(betas_[step]);
      const std::int64_t base = static_cast<std::int64_t>(b) * m;
      for (std::int64_t i = base; i < base + m; ++i) {
        const double xt = x_t.data<float>()[i], x = x0.data<float>()[i];
        const auto k = static_cast<std::size_t>(i);
        const double pred_x0 = recip * xt - recip_m1 * e[k];  // unclipped, as in training
        const VbTerm term = vb_term(v[k], x, c1 * x + c2 * xt, min_log, c1 * pred_x0 + c2 * xt, max_log, min_log,
                                    step == 0);
        total += term.value;
        derivative[k] = term.d_v;
      }
    }
    *d_v = Tensor::from_vector(derivative, in[0].shape()).to(in[0].dtype());
    return autograd::TensorList{Tensor::scalar(total, in[0].dtype())};
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
