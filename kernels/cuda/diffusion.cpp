// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::diffusion_noise(const Stream& stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                       std::int64_t steps, const double* schedule, const double* times, const float* x0,
                       const float* noise, float* out) {
  WF_FAIL("cuda: diffusion_noise is not implemented yet");
}

void CudaKernels::diffusion_vb(const Stream& stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                    const double* schedule, const double* times, const double* v, const double* eps,
                    const float* x0, const float* x_t, double* d_v, double* total) {
  WF_FAIL("cuda: diffusion_vb is not implemented yet");
}

void CudaKernels::timestep_embedding(const Stream& stream, std::int64_t batch, std::int64_t channels,
                          double max_period, const double* times, float* out) {
  WF_FAIL("cuda: timestep_embedding is not implemented yet");
}


}  // namespace wf::kernels::cuda
