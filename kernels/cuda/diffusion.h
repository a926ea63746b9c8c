#pragma once
// Launchers of the diffusion kernels (kernels/cuda/diffusion.cu) with kernels/cpu/diffusion.h's
// and kernels/cpu/timestep_embedding.h's semantics, in f64 throughout. Every pointer is device
// memory. A ddpm time that is not an integer step in [0, steps) is reported to `record` with
// `message` (the sample, the time's integer part) and its sample skipped (zeros). fmt-free.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "src/core/cuda/device_error.h"

namespace wf::kernels::cuda {

// out[b, i] = float(a_b·x0[b, i] + s_b·noise[b, i]); the schedule table is read for ddpm only.
void launch_diffusion_noise(cudaStream_t stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                            std::int64_t steps, const double* schedule, const double* times, const float* x0,
                            const float* noise, float* out, detail::DeviceErrorRecord* record, int message);

// How many partial sums launch_diffusion_vb's `partials` (device memory) holds for n elements.
int diffusion_vb_partials(std::int64_t n);
// d_v[i] and *total = Σ L_vb: the terms summed per block in a fixed grid (a function of n only),
// then the blocks' sums in block order: the same bits on every run.
void launch_diffusion_vb(cudaStream_t stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                         const double* schedule, const double* times, const double* v, const double* eps,
                         const float* x0, const float* x_t, double* d_v, double* total, double* partials,
                         detail::DeviceErrorRecord* record, int message);

// out [batch, channels] = [cos(t_b·freq) | sin(t_b·freq)] for freq [channels / 2] (the host's table).
void launch_timestep_embedding(cudaStream_t stream, std::int64_t batch, std::int64_t channels, const double* freq,
                               const double* times, float* out);

}  // namespace wf::kernels::cuda
