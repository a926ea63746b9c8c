// The diffusion kernels (kernels/cuda/diffusion.h): one thread per element, in f64, with the
// per-element formulas of kernels/cpu/diffusion.cpp (vb_term) ported as they are.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/diffusion.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/diffusion_schedule.h"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kPi = 3.14159265358979323846;
constexpr int kMaxPartials = 1024;  // blocks of the L_vb sum: its partials fit one block's final pass

// The schedule row of a ddpm time: true when t is an integer step in [0, steps).
__device__ __forceinline__ bool ddpm_step(double t, std::int64_t steps, std::int64_t* step) {
  if (!(t >= 0.0 && t < static_cast<double>(steps))) return false;  // also NaN
  *step = static_cast<std::int64_t>(t);
  return static_cast<double>(*step) == t;
}
// What a bad time's report carries: its integer part (0 where it has none that fits).
__device__ __forceinline__ long long integer_part(double t) {
  return t > -9.0e18 && t < 9.0e18 ? static_cast<long long>(t) : 0;
}

// kernels/cpu/diffusion.cpp's approx_cdf, its derivative and clamped_log.
__device__ double approx_cdf(double u) { return 0.5 * (1.0 + tanh(sqrt(2.0 / kPi) * (u + 0.044715 * u * u * u))); }
__device__ double approx_cdf_derivative(double u) {
  const double th = tanh(sqrt(2.0 / kPi) * (u + 0.044715 * u * u * u));
  return 0.5 * (1.0 - th * th) * sqrt(2.0 / kPi) * (1.0 + 3.0 * 0.044715 * u * u);
}
struct LogAndSlope {
  double value, slope;
};
__device__ LogAndSlope clamped_log(double p) {
  constexpr double kFloor = 1e-12;
  return p >= kFloor ? LogAndSlope{log(p), 1.0 / p} : LogAndSlope{log(kFloor), 0.0};
}

// kernels/cpu/diffusion.cpp's vb_term: one L_vb element in bits and its derivative by v.
struct VbTerm {
  double value, d_v;
};
__device__ VbTerm vb_term(double v, double x0, double mean_true, double log_var_true, double mean_model,
                          double max_log, double min_log, bool decoder) {
  const double frac = (v + 1.0) / 2.0;
  const double lv = frac * max_log + (1.0 - frac) * min_log;
  const double dlv_dv = (max_log - min_log) / 2.0;
  if (!decoder) {
    const double ratio = exp(log_var_true - lv), d = mean_true - mean_model, scaled = d * d * exp(-lv);
    const double kl = 0.5 * (-1.0 + lv - log_var_true + ratio + scaled);
    return {kl / kLn2, 0.5 * (1.0 - ratio - scaled) * dlv_dv / kLn2};
  }
  const double inv_std = exp(-0.5 * lv), centered = x0 - mean_model;
  const double plus_in = inv_std * (centered + 1.0 / 255.0), min_in = inv_std * (centered - 1.0 / 255.0);
  const double cdf_plus = approx_cdf(plus_in), cdf_min = approx_cdf(min_in);
  const double d_cdf_plus = approx_cdf_derivative(plus_in) * (-0.5 * plus_in);
  const double d_cdf_min = approx_cdf_derivative(min_in) * (-0.5 * min_in);
  double log_prob = 0, d_log_prob = 0;
  if (x0 < -0.999) {
    const LogAndSlope l = clamped_log(cdf_plus);
    log_prob = l.value, d_log_prob = l.slope * d_cdf_plus;
  } else if (x0 > 0.999) {
    const LogAndSlope l = clamped_log(1.0 - cdf_min);
    log_prob = l.value, d_log_prob = -l.slope * d_cdf_min;
  } else {
    const LogAndSlope l = clamped_log(cdf_plus - cdf_min);
    log_prob = l.value, d_log_prob = l.slope * (d_cdf_plus - d_cdf_min);
  }
  return {-log_prob / kLn2, -d_log_prob * dlv_dv / kLn2};
}

__global__ void diffusion_noise_kernel(bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                                       const double* schedule, const double* times, const float* x0,
                                       const float* noise, float* out, detail::DeviceErrorRecord* record,
                                       int message) {
  const std::int64_t n = batch * per_sample;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t b = i / per_sample;
    const double t = times[b];
    double a = 1.0 - t, s = t;
    if (!flow) {
      std::int64_t step = 0;
      if (!ddpm_step(t, steps, &step)) {
        if (i == b * per_sample) report_device_error(record, message, b, integer_part(t));
        out[i] = 0.0f;
        continue;
      }
      const double* row = schedule + step * kScheduleColumns;
      a = row[kSqrtAlphaBar], s = row[kSqrtOneMinusAlphaBar];
    }
    // Rounded products and sum (no fused multiply-add), as the CPU evaluates a·x + s·e.
    out[i] = static_cast<float>(
        __dadd_rn(__dmul_rn(a, static_cast<double>(x0[i])), __dmul_rn(s, static_cast<double>(noise[i]))));
  }
}

__global__ void diffusion_vb_kernel(std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                                    const double* schedule, const double* times, const double* v, const double* eps,
                                    const float* x0, const float* x_t, double* d_v, double* partials,
                                    detail::DeviceErrorRecord* record, int message) {
  __shared__ double scratch[32];
  const std::int64_t n = batch * per_sample;
  double sum = 0.0;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t b = i / per_sample;
    std::int64_t step = 0;
    if (!ddpm_step(times[b], steps, &step)) {
      if (i == b * per_sample) report_device_error(record, message, b, integer_part(times[b]));
      d_v[i] = 0.0;
      continue;
    }
    const double* row = schedule + step * kScheduleColumns;
    const double recip = row[kSqrtRecipAlphaBar], recip_m1 = row[kSqrtRecipAlphaBarM1];
    const double c1 = row[kPosteriorMeanCoef1], c2 = row[kPosteriorMeanCoef2];
    const double min_log = row[kPosteriorLogVariance], max_log = row[kLogBeta];
    const double xt = x_t[i], x = x0[i];
    const double pred_x0 = recip * xt - recip_m1 * eps[i];  // unclipped, as in training
    const VbTerm term =
        vb_term(v[i], x, c1 * x + c2 * xt, min_log, c1 * pred_x0 + c2 * xt, max_log, min_log, step == 0);
    sum += term.value;
    d_v[i] = term.d_v;
  }
  sum = block_sum(sum, scratch);  // every thread: the loop above has no early exit
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// *total = Σ partials[0..count) (one block: the same order every run).
__global__ void sum_partials_kernel(int count, const double* partials, double* total) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *total = sum;
}

__global__ void timestep_embedding_kernel(std::int64_t batch, std::int64_t channels, const double* freq,
                                          const double* times, float* out) {
  const std::int64_t half = channels / 2;
  const std::int64_t n = batch * half;
  WF_GRID_STRIDE_LOOP(e, n) {
    const std::int64_t b = e / half, k = e - b * half;
    const double arg = times[b] * freq[k];
    double s = 0.0, c = 0.0;
    sincos(arg, &s, &c);
    out[b * channels + k] = static_cast<float>(c);
    out[b * channels + half + k] = static_cast<float>(s);
  }
}

}  // namespace

void launch_diffusion_noise(cudaStream_t stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                            std::int64_t steps, const double* schedule, const double* times, const float* x0,
                            const float* noise, float* out, detail::DeviceErrorRecord* record, int message) {
  const std::int64_t n = batch * per_sample;
  if (n == 0) return;
  diffusion_noise_kernel<<<blocks_for(n), kThreads, 0, stream>>>(flow, batch, per_sample, steps, schedule, times, x0,
                                                                 noise, out, record, message);
  WF_CUDA_CHECK_LAUNCH("diffusion_noise_kernel");
}

int diffusion_vb_partials(std::int64_t n) {
  const int blocks = blocks_for(n);
  return blocks < kMaxPartials ? blocks : kMaxPartials;
}

void launch_diffusion_vb(cudaStream_t stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                         const double* schedule, const double* times, const double* v, const double* eps,
                         const float* x0, const float* x_t, double* d_v, double* total, double* partials,
                         detail::DeviceErrorRecord* record, int message) {
  const std::int64_t n = batch * per_sample;
  const int blocks = diffusion_vb_partials(n);
  if (n > 0) {
    diffusion_vb_kernel<<<blocks, kThreads, 0, stream>>>(batch, per_sample, steps, schedule, times, v, eps, x0, x_t,
                                                         d_v, partials, record, message);
    WF_CUDA_CHECK_LAUNCH("diffusion_vb_kernel");
  }
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(n > 0 ? blocks : 0, partials, total);
  WF_CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

void launch_timestep_embedding(cudaStream_t stream, std::int64_t batch, std::int64_t channels, const double* freq,
                               const double* times, float* out) {
  const std::int64_t n = batch * (channels / 2);
  if (n == 0) return;
  timestep_embedding_kernel<<<blocks_for(n), kThreads, 0, stream>>>(batch, channels, freq, times, out);
  WF_CUDA_CHECK_LAUNCH("timestep_embedding_kernel");
}

}  // namespace wf::kernels::cuda
