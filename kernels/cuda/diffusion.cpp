// The diffusion entries of the CUDA backend: argument checks on the host, the kernels of
// kernels/cuda/diffusion.cu on the stream. A ddpm time that is no step is data: the kernel finds
// it and it is raised at the next host synchronisation (kernels/cuda/data_error.h).
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/data_error.h"
#include "kernels/cuda/diffusion.h"
#include "kernels/cuda/dispatch.h"

namespace wf::kernels::cuda {
namespace {

// kernels/cpu/diffusion.cpp's ddpm_step message; the device reports the sample and the integer
// part of its time (it cannot carry the time itself).
DataError bad_ddpm_time(const Stream& stream, std::int64_t steps) {
  return data_error(stream, fmt::format("Diffusion: a ddpm time is an integer step in [0, {}), got a time of sample "
                                        "{{0}} that is not one (its integer part: {{1}})",
                                        steps));
}

void check_sizes(const char* what, std::int64_t batch, std::int64_t per_sample, std::int64_t steps) {
  WF_CHECK(batch >= 0 && per_sample >= 0 && steps >= 0,
           "{}: sizes must be non-negative, got batch={} per_sample={} steps={}", what, batch, per_sample, steps);
}

}  // namespace

void CudaKernels::diffusion_noise(const Stream& stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                                  std::int64_t steps, const double* schedule, const double* times, const float* x0,
                                  const float* noise, float* out) {
  check_sizes("diffusion_noise", batch, per_sample, steps);
  const DataError error = bad_ddpm_time(stream, steps);
  launch_diffusion_noise(native(stream), flow, batch, per_sample, steps, schedule, times, x0, noise, out,
                         error.record, error.message);
}

void CudaKernels::diffusion_vb(const Stream& stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                               const double* schedule, const double* times, const double* v, const double* eps,
                               const float* x0, const float* x_t, double* d_v, double* total) {
  check_sizes("diffusion_vb", batch, per_sample, steps);
  const DataError error = bad_ddpm_time(stream, steps);
  const detail::CudaScratch partials(
      stream, static_cast<std::size_t>(diffusion_vb_partials(batch * per_sample)) * sizeof(double));
  launch_diffusion_vb(native(stream), batch, per_sample, steps, schedule, times, v, eps, x0, x_t, d_v, total,
                      partials.as<double>(), error.record, error.message);
}

void CudaKernels::timestep_embedding(const Stream& stream, std::int64_t batch, std::int64_t channels,
                                     double max_period, const double* times, float* out) {
  WF_CHECK(batch >= 0 && channels >= 0 && channels % 2 == 0,
           "timestep_embedding: need batch >= 0 and an even channel count, got batch={} channels={}", batch, channels);
  const std::int64_t half = channels / 2;
  if (batch * half == 0) return;
  // The frequencies on the host exactly as kernels/cpu/timestep_embedding.cpp forms them, so each
  // argument t·freq is the CPU's bit for bit.
  std::vector<double> freq(static_cast<std::size_t>(half));
  for (std::int64_t k = 0; k < half; ++k) {
    freq[static_cast<std::size_t>(k)] =
        std::exp(-std::log(max_period) * static_cast<double>(k) / static_cast<double>(half));
  }
  const detail::CudaScratch table(stream, freq.data(), freq.size() * sizeof(double));
  launch_timestep_embedding(native(stream), batch, channels, table.as<const double>(), times, out);
}

}  // namespace wf::kernels::cuda
