// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::adamw_step(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                  void* exp_avg, void* exp_avg_sq, const AdamWParams& params) {
  WF_FAIL("cuda: adamw_step is not implemented yet");
}

void CudaKernels::adamw_update(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                    void* exp_avg, void* exp_avg_sq, void* ema, const AdamWParams& params, const EmaParams& e,
                    std::int64_t* applied, const double* grad_norm) {
  WF_FAIL("cuda: adamw_update is not implemented yet");
}


}  // namespace wf::kernels::cuda
