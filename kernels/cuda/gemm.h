#pragma once
// The CUDA GEMMs (kernels/cuda/gemm.cpp, through cuBLASLt): the f32 precision switch and their
// description for `wallfacer info`. Free of CUDA's headers, so that code built without the
// toolkit's include path (the CLI, tests/cuda) can include it; the launcher of the GEMMs' own
// kernel is in kernels/cuda/gemm_kernels.h.
#include <string>

namespace wf::kernels::cuda {

// TF32 for f32 products (CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores round the operands to 10
// mantissa bits, ~1e-3 relative per product). Off by default, because f32 runs on the GPU must
// match the CPU to ~1e-5 (CUBLAS_COMPUTE_32F: true f32 arithmetic). The environment variable
// WF_CUDA_TF32=1 turns it on for the process (read at the first product); set_cuda_tf32
// overrides that from then on. f64 and bf16 products are unaffected.
void set_cuda_tf32(bool on);
bool cuda_tf32();

// One line for `wallfacer info`: the cuBLASLt library version loaded (and the one compiled
// against) and whether f32 products use TF32.
std::string cuda_gemm_description();

}  // namespace wf::kernels::cuda
