// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::gemm(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
            std::int64_t K, double alpha, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
            double beta, void* C, std::int64_t ldc) {
  WF_FAIL("cuda: gemm is not implemented yet");
}

void CudaKernels::gemm_batched(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t batch,
                    std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const void* A,
                    std::int64_t lda, std::int64_t stride_a, const void* B, std::int64_t ldb,
                    std::int64_t stride_b, double beta, void* C, std::int64_t ldc,
                    std::int64_t stride_c) {
  WF_FAIL("cuda: gemm_batched is not implemented yet");
}

void CudaKernels::gemm_bf16(const Stream& stream, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                 std::int64_t K, float alpha, const bf16* A, std::int64_t lda, const bf16* B,
                 std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  WF_FAIL("cuda: gemm_bf16 is not implemented yet");
}


}  // namespace wf::kernels::cuda
