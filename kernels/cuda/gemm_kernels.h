#pragma once
// The GEMMs' own kernel (kernels/cuda/gemm.cu), launched by kernels/cuda/gemm.cpp for products
// that multiply nothing, which cuBLASLt is not asked to do. Read by nvcc and the host compiler:
// native types only, no wallfacer header that needs fmt.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace wf::kernels::cuda {

// C[b] = beta·C[b] for the `batch` row-major [rows, cols] matrices C + b·stride (leading
// dimension ld), with BLAS semantics: beta == 0 writes 0 and never reads C (NaN does not leak).
// What a product with K == 0 or alpha == 0 leaves (kernels/cpu/gemm.h).
void launch_scale_matrices(cudaStream_t stream, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld, std::int64_t stride, float beta, float* C);
void launch_scale_matrices(cudaStream_t stream, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                           std::int64_t ld, std::int64_t stride, double beta, double* C);

}  // namespace wf::kernels::cuda
