#pragma once
// The kernels of models/diffusion.h (DiT's diffusion processes): noising a batch at one time per
// sample, and the learned-variance bound L_vb with its derivative by the variance output.
//
// The ddpm schedule is a host-built table `schedule` [steps, kScheduleColumns] f64 (row t holds
// the constants of step t, kernels/diffusion_schedule.h) copied to the data's device: the kernels
// look the constants of each sample's time up in it, so a batch's times stay device tensors. Times are
// f64: flow times t ∈ [0, 1], ddpm times integer steps in [0, steps) (anything else is an error).
// All arithmetic is in f64, each result rounded once.
#include <cstdint>

#include "kernels/diffusion_schedule.h"

namespace wf::kernels::cpu {

using kernels::ScheduleColumn;  // kernels/diffusion_schedule.h: the table's columns

// out[b, i] = float(a_b·x0[b, i] + s_b·noise[b, i]) for b < batch, i < per_sample, with
// (a_b, s_b) = (1 − t_b, t_b) for flow and (√ᾱ, √(1 − ᾱ)) at step t_b for ddpm (schedule
// unread for flow).
void diffusion_noise(bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                     const double* schedule, const double* times, const float* x0, const float* noise, float* out);

// One L_vb element and its derivative by the variance output v (f64): the KL in bits between the
// true posterior N(mean_true, exp(log_var_true)) and the model's N(mean_model, exp(lv)),
// lv = ((v+1)/2)·max_log + (1 − (v+1)/2)·min_log; at t = 0 (decoder) the negative
// log-likelihood in bits of x0 under the model's Gaussian discretised to 256 bins.
struct VbTerm {
  double value = 0;
  double d_v = 0;
};
VbTerm vb_term(double v, double x0, double mean_true, double log_var_true, double mean_model, double max_log,
               double min_log, bool decoder);

// Σ L_vb over the [batch, per_sample] elements (ddpm; the model's mean from its ε prediction
// `eps`, unclipped, as in training) into *total (summed in element order), and each element's
// derivative by v into d_v.
void diffusion_vb(std::int64_t batch, std::int64_t per_sample, std::int64_t steps, const double* schedule,
                  const double* times, const double* v, const double* eps, const float* x0, const float* x_t,
                  double* d_v, double* total);

// ---- references: each element from the formulas, the schedule constants recomputed -------------
// From the linear β schedule [beta_start, beta_end] of `steps` steps instead of the table.
void diffusion_noise_reference(bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                               double beta_start, double beta_end, const double* times, const float* x0,
                               const float* noise, float* out);
void diffusion_vb_reference(std::int64_t batch, std::int64_t per_sample, std::int64_t steps, double beta_start,
                            double beta_end, const double* times, const double* v, const double* eps, const float* x0,
                            const float* x_t, double* d_v, double* total);

}  // namespace wf::kernels::cpu
