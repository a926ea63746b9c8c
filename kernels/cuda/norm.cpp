// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                       const void* x, void* y) {
  WF_FAIL("cuda: softmax_forward is not implemented yet");
}

void CudaKernels::log_softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                           const void* x, void* y) {
  WF_FAIL("cuda: log_softmax_forward is not implemented yet");
}

void CudaKernels::softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                        const void* y, const void* dy, void* dx) {
  WF_FAIL("cuda: softmax_backward is not implemented yet");
}

void CudaKernels::log_softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                            const void* y, const void* dy, void* dx) {
  WF_FAIL("cuda: log_softmax_backward is not implemented yet");
}

void CudaKernels::layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                         const void* x, const void* weight, const void* bias, double eps, void* y,
                         void* mean, void* rstd) {
  WF_FAIL("cuda: layernorm_forward is not implemented yet");
}

void CudaKernels::layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                          const void* x, const void* weight, const void* mean, const void* rstd,
                          const void* dy, void* dx, void* dweight, void* dbias) {
  WF_FAIL("cuda: layernorm_backward is not implemented yet");
}

void CudaKernels::rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                       const void* x, const void* weight, double eps, void* y, void* rstd) {
  WF_FAIL("cuda: rmsnorm_forward is not implemented yet");
}

void CudaKernels::rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                        const void* x, const void* weight, const void* rstd, const void* dy, void* dx,
                        void* dweight) {
  WF_FAIL("cuda: rmsnorm_backward is not implemented yet");
}


}  // namespace wf::kernels::cuda
