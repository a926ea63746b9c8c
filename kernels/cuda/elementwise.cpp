// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::binary_broadcast(const Stream& stream, DType dtype, BinaryOp op, const void* a,
                        const std::vector<std::int64_t>& a_shape, const void* b,
                        const std::vector<std::int64_t>& b_shape, void* out,
                        const std::vector<std::int64_t>& out_shape) {
  WF_FAIL("cuda: binary_broadcast is not implemented yet");
}

void CudaKernels::affine(const Stream& stream, DType dtype, std::int64_t n, double alpha, double shift, const void* x,
              void* out) {
  WF_FAIL("cuda: affine is not implemented yet");
}

void CudaKernels::add_scaled(const Stream& stream, DType dtype, std::int64_t n, double alpha, const void* x,
                  void* y) {
  WF_FAIL("cuda: add_scaled is not implemented yet");
}

void CudaKernels::add_bias(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols, const void* x,
                const void* bias, void* out) {
  WF_FAIL("cuda: add_bias is not implemented yet");
}

void CudaKernels::bias_residual_add(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                         const void* x, const void* bias, const void* residual, void* out) {
  WF_FAIL("cuda: bias_residual_add is not implemented yet");
}

void CudaKernels::unary_forward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* x,
                     void* y) {
  WF_FAIL("cuda: unary_forward is not implemented yet");
}

void CudaKernels::unary_backward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* saved,
                      const void* dy, void* dx) {
  WF_FAIL("cuda: unary_backward is not implemented yet");
}

void CudaKernels::dropout_mask(const Stream& stream, DType dtype, std::int64_t n, double p, std::uint64_t seed,
                    std::uint64_t first, const DropoutLayout& layout, const void* x, void* out) {
  WF_FAIL("cuda: dropout_mask is not implemented yet");
}

void CudaKernels::clamp(const Stream& stream, DType dtype, std::int64_t n, double lo, double hi, const void* x,
             void* y) {
  WF_FAIL("cuda: clamp is not implemented yet");
}

void CudaKernels::scale_inplace(const Stream& stream, DType dtype, std::int64_t n, void* x, double alpha) {
  WF_FAIL("cuda: scale_inplace is not implemented yet");
}

void CudaKernels::scale_inplace_by(const Stream& stream, DType dtype, std::int64_t n, void* x, const double* factor) {
  WF_FAIL("cuda: scale_inplace_by is not implemented yet");
}

void CudaKernels::scale_by_coefficient(const Stream& stream, DType dtype, std::int64_t n, void* x,
                            const double* coefficient) {
  WF_FAIL("cuda: scale_by_coefficient is not implemented yet");
}


}  // namespace wf::kernels::cuda
