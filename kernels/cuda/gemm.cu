// The GEMMs' own kernel: C = beta·C for products that multiply nothing (K == 0 or alpha == 0),
// which cuBLASLt is not asked to do (kernels/cuda/gemm.cpp).
#include "kernels/cuda/gemm_kernels.h"

#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// One thread per element of the batch's matrices, in 64-bit indices: i = (b·rows + r)·cols + c.
template <class T>
__global__ void scale_matrices_kernel(std::int64_t batch, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                      std::int64_t stride, T beta, T* C) {
  const std::int64_t n = batch * rows * cols;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t c = i % cols, br = i / cols;
    const std::int64_t r = br % rows, b = br / rows;
    T& x = C[b * stride + r * ld + c];
    x = beta == T(0) ? T(0) : beta * x;  // BLAS: beta 0 overwrites, never 0·NaN
  }
}

template <class T>
void scale_matrices(cudaStream_t stream, std::int64_t batch, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                    std::int64_t stride, T beta, T* C) {
  const std::int64_t n = batch * rows * cols;
  if (n == 0 || beta == T(1)) return;
  scale_matrices_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(batch, rows, cols, ld, stride, beta, C);
  WF_CUDA_CHECK_LAUNCH("scale_matrices_kernel");
}

}  // namespace

void launch_scale_matrices(cudaStream_t stream, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld, std::int64_t stride, float beta, float* C) {
  scale_matrices(stream, batch, rows, cols, ld, stride, beta, C);
}
void launch_scale_matrices(cudaStream_t stream, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld, std::int64_t stride, double beta, double* C) {
  scale_matrices(stream, batch, rows, cols, ld, stride, beta, C);
}

}  // namespace wf::kernels::cuda
