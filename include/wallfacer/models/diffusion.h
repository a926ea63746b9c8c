#pragma once
// Diffusion processes for image models (DiT): how clean data x₀ and Gaussian noise ε make the
// model's input at a time t, what the model is trained to predict, its loss, and the samplers.
//
//   ddpm (Ho et al. 2020; DiT's setting): T = 1000 steps, β linear from 1e-4 to 0.02,
//        ᾱ_t = Π_{s≤t}(1 − β_s), x_t = √ᾱ_t·x₀ + √(1−ᾱ_t)·ε, the model predicts ε (MSE);
//        with learn_sigma it also predicts v ∈ [−1, 1] per element, the interpolation of its
//        log-variance between log β_t and the posterior's log β̃_t (Nichol & Dhariwal 2021),
//        trained by the variational bound L_vb (in bits, the mean's gradient stopped), as in
//        facebookresearch/DiT's gaussian_diffusion.py. Sampled with DDIM (η = 0).
//   flow (rectified flow, Liu et al. 2022): t ∈ [0, 1], x_t = (1 − t)·x₀ + t·ε, the model
//        predicts the velocity ε − x₀ (MSE); the timestep embedder sees 1000·t. Sampled with
//        Euler steps from t = 1 to 0.
//
// The loss is returned as a SUM over elements with their count (models::LossSum): the trainer
// averages once over the global batch, so the loss is DiT's mean whatever the layout. Every
// schedule constant is computed in f64.
#include <cstdint>
#include <functional>
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::models {

enum class DiffusionKind { ddpm, flow };
const char* diffusion_kind_name(DiffusionKind kind);

struct DiffusionOptions {
  DiffusionKind kind = DiffusionKind::ddpm;
  std::int64_t num_timesteps = 1000;
  double beta_start = 1e-4;
  double beta_end = 0.02;
  bool learn_sigma = false;  // ddpm only
};

class Diffusion {
 public:
  explicit Diffusion(const DiffusionOptions& options);
  const DiffusionOptions& options() const { return options_; }

  // A training time from a uniform draw u ∈ [0, 1): ddpm ⌊u·T⌋ (an integer), flow u.
  double time_from_uniform(double u) const;
  // What the timestep embedder is given for time t: ddpm t, flow 1000·t.
  double model_time(double t) const;
  // The same for times [B] f64 on any device (a tensor on their device).
  Tensor model_times(const Tensor& times) const;
  // x_t = a(t)·x₀ + b(t)·ε for x₀, ε [B, ...] f32 and one time per sample (differentiable in
  // neither): times [B] f64 on x₀'s device, or host values (moved there).
  Tensor noised(const Tensor& x0, const Tensor& noise, const Tensor& times) const;
  Tensor noised(const Tensor& x0, const Tensor& noise, const std::vector<double>& t) const;
  // What the model is trained to predict: ε (ddpm) or ε − x₀ (flow).
  Tensor target(const Tensor& x0, const Tensor& noise) const;

  // The loss SUM over every element of prediction [B, ...] (differentiable in prediction and
  // variance): Σ (prediction − target)², plus with learn_sigma Σ L_vb(variance), whose
  // per-element terms are DiT's (KL in bits; the decoder NLL at t = 0) with the mean from the
  // prediction with its gradient stopped. x0 and x_t (read with learn_sigma only; may be
  // undefined otherwise) have prediction's shape; t one per sample.
  Tensor loss_sum(const Tensor& prediction, const Tensor& variance, const Tensor& target, const Tensor& x0,
                  const Tensor& x_t, const Tensor& times) const;
  Tensor loss_sum(const Tensor& prediction, const Tensor& variance, const Tensor& target, const Tensor& x0,
                  const Tensor& x_t, const std::vector<double>& t) const;

  // ---- sampling --------------------------------------------------------------------------
  // The model as the sampler calls it: (x_t [B, ...], model times [B]) → prediction [B, ...]
  // (ε for ddpm, velocity for flow), with classifier-free guidance already applied.
  using Denoiser = std::function<Tensor(const Tensor& x_t, const std::vector<double>& model_times)>;
  // x₀ from x_T = `noise` in `steps` steps: DDIM (η = 0) over `steps` evenly spaced timesteps for
  // ddpm (the model sees the original timestep numbers), Euler from t = 1 to 0 for flow. No grad.
  // `clip_x0`: each DDIM step clamps its x̂₀ to [−1, 1] and takes ε from the clamped x̂₀ (DDPM's
  // clip_denoised, for data known to lie there: pixels; DiT's unbounded latents leave it off).
  Tensor sample(const Denoiser& model, const Tensor& noise, std::int64_t steps, bool clip_x0 = false) const;

  // Schedule constants (ddpm), for tests: ᾱ_t and the posterior log-variance (clipped) at t.
  double alpha_bar(std::int64_t t) const { return alphas_cumprod_.at(static_cast<std::size_t>(t)); }
  double posterior_log_variance(std::int64_t t) const {
    return posterior_log_variance_clipped_.at(static_cast<std::size_t>(t));
  }
  double beta(std::int64_t t) const { return betas_.at(static_cast<std::size_t>(t)); }

 private:
  // The noising coefficients of time t: x_t = first·x₀ + second·ε.
  std::pair<double, double> coefficients(double t) const;
  // Σ L_vb over the elements (see loss_sum).
  Tensor vb_sum(const Tensor& variance, const Tensor& eps, const Tensor& x0, const Tensor& x_t,
                const Tensor& times) const;

  DiffusionOptions options_;
  std::vector<double> betas_, alphas_cumprod_, alphas_cumprod_prev_;
  std::vector<double> posterior_log_variance_clipped_, posterior_mean_coef1_, posterior_mean_coef2_;
  // The ddpm constants per step as the kernels read them (kernels/cpu/diffusion.h), [T, kernels::kScheduleColumns] f64:
  // built once on the host, copied to the data's device by each call (64 KB for T = 1000).
  Tensor schedule_;
};

}  // namespace wf::models
