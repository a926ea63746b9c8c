#include "kernels/cpu/diffusion.h"

#include <cmath>
#include <utility>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

constexpr double kLn2 = 0.69314718055994530942;

// The schedule row of ddpm time t, which must be an integer step in [0, steps).
std::int64_t ddpm_step(double t, std::int64_t steps) {
  const auto step = static_cast<std::int64_t>(t);
  WF_CHECK(static_cast<double>(step) == t && step >= 0 && step < steps,
           "Diffusion: a ddpm time is an integer step in [0, {}), got {}", steps, t);
  return step;
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

// ᾱ_t and ᾱ_{t−1} (1 at t = 0) and β_t of the linear schedule, straight from the product.
struct StepConstants {
  double beta, alpha_bar, alpha_bar_prev;
};
StepConstants linear_schedule_at(std::int64_t t, std::int64_t steps, double beta_start, double beta_end) {
  StepConstants c{0, 1, 1};
  for (std::int64_t s = 0; s <= t; ++s) {
    c.beta = beta_start + (beta_end - beta_start) * static_cast<double>(s) / static_cast<double>(steps - 1);
    c.alpha_bar_prev = c.alpha_bar;
    c.alpha_bar *= 1.0 - c.beta;
  }
  return c;
}

double posterior_variance_at(std::int64_t t, std::int64_t steps, double beta_start, double beta_end) {
  const StepConstants c = linear_schedule_at(t, steps, beta_start, beta_end);
  return c.beta * (1.0 - c.alpha_bar_prev) / (1.0 - c.alpha_bar);
}

}  // namespace

void diffusion_noise(bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                     const double* schedule, const double* times, const float* x0, const float* noise, float* out) {
  for (std::int64_t b = 0; b < batch; ++b) {
    double a = 1.0 - times[b], s = times[b];
    if (!flow) {
      const double* row = schedule + ddpm_step(times[b], steps) * kScheduleColumns;
      a = row[kSqrtAlphaBar], s = row[kSqrtOneMinusAlphaBar];
    }
    const float* x = x0 + b * per_sample;
    const float* e = noise + b * per_sample;
    float* o = out + b * per_sample;
    for (std::int64_t i = 0; i < per_sample; ++i) o[i] = static_cast<float>(a * x[i] + s * e[i]);
  }
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

void diffusion_vb(std::int64_t batch, std::int64_t per_sample, std::int64_t steps, const double* schedule,
                  const double* times, const double* v, const double* eps, const float* x0, const float* x_t,
                  double* d_v, double* total) {
  double sum = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t step = ddpm_step(times[b], steps);
    const double* row = schedule + step * kScheduleColumns;
    const double recip = row[kSqrtRecipAlphaBar], recip_m1 = row[kSqrtRecipAlphaBarM1];
    const double c1 = row[kPosteriorMeanCoef1], c2 = row[kPosteriorMeanCoef2];
    const double min_log = row[kPosteriorLogVariance], max_log = row[kLogBeta];
    for (std::int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) {
      const double xt = x_t[i], x = x0[i];
      const double pred_x0 = recip * xt - recip_m1 * eps[i];  // unclipped, as in training
      const VbTerm term =
          vb_term(v[i], x, c1 * x + c2 * xt, min_log, c1 * pred_x0 + c2 * xt, max_log, min_log, step == 0);
      sum += term.value;
      d_v[i] = term.d_v;
    }
  }
  *total = sum;
}

void diffusion_noise_reference(bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                               double beta_start, double beta_end, const double* times, const float* x0,
                               const float* noise, float* out) {
  for (std::int64_t i = 0; i < batch * per_sample; ++i) {
    const double t = times[i / per_sample];
    const double alpha_bar = flow ? 0 : linear_schedule_at(ddpm_step(t, steps), steps, beta_start, beta_end).alpha_bar;
    const double a = flow ? 1.0 - t : std::sqrt(alpha_bar), s = flow ? t : std::sqrt(1.0 - alpha_bar);
    out[i] = static_cast<float>(a * double(x0[i]) + s * double(noise[i]));
  }
}

void diffusion_vb_reference(std::int64_t batch, std::int64_t per_sample, std::int64_t steps, double beta_start,
                            double beta_end, const double* times, const double* v, const double* eps, const float* x0,
                            const float* x_t, double* d_v, double* total) {
  *total = 0;
  for (std::int64_t i = 0; i < batch * per_sample; ++i) {
    const std::int64_t t = ddpm_step(times[i / per_sample], steps);
    const StepConstants c = linear_schedule_at(t, steps, beta_start, beta_end);
    // q(x_{t−1} | x_t, x₀) = N(c1·x₀ + c2·x_t, β̃_t), β̃ clipped to β̃_1 at t = 0.
    const double c1 = c.beta * std::sqrt(c.alpha_bar_prev) / (1.0 - c.alpha_bar);
    const double c2 = (1.0 - c.alpha_bar_prev) * std::sqrt(1.0 - c.beta) / (1.0 - c.alpha_bar);
    const double log_var = std::log(posterior_variance_at(t == 0 ? 1 : t, steps, beta_start, beta_end));
    const double x = x0[i], xt = x_t[i];
    const double pred_x0 = (xt - std::sqrt(1.0 - c.alpha_bar) * eps[i]) / std::sqrt(c.alpha_bar);
    const VbTerm term = vb_term(v[i], x, c1 * x + c2 * xt, log_var, c1 * pred_x0 + c2 * xt, std::log(c.beta),
                                log_var, t == 0);
    *total += term.value;
    d_v[i] = term.d_v;
  }
}

}  // namespace wf::kernels::cpu
