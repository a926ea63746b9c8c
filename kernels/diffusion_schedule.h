#pragma once
// The layout of the ddpm schedule table that the diffusion kernels read (kernels/backend.h
// diffusion_noise, diffusion_vb): [steps, kScheduleColumns] f64, row t the constants of step t.
// Built on the host by models/diffusion (every constant in f64), moved to the data's device.
#include <cstdint>

namespace wf::kernels {

enum ScheduleColumn : std::int64_t {
  kSqrtAlphaBar,          // √ᾱ_t
  kSqrtOneMinusAlphaBar,  // √(1 − ᾱ_t)
  kSqrtRecipAlphaBar,     // √(1/ᾱ_t)
  kSqrtRecipAlphaBarM1,   // √(1/ᾱ_t − 1)
  kPosteriorMeanCoef1,    // the posterior mean's coefficient of x₀
  kPosteriorMeanCoef2,    // … and of x_t
  kPosteriorLogVariance,  // log β̃_t, clipped at t = 0 (the smallest log-variance the model interpolates)
  kLogBeta,               // log β_t (the largest)
  kScheduleColumns
};

}  // namespace wf::kernels
