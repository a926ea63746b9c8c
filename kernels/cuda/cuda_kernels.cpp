// The CUDA kernel backend's identity and policies; its entries are defined by area in the files
// kernels/cuda/cuda_kernels.h names.
#include "kernels/cuda/cuda_kernels.h"

#include "kernels/builtin_backends.h"

namespace wf::kernels {
namespace cuda {

const char* CudaKernels::name() const { return "cuda"; }

// Tensor cores multiply bf16 with f32 accumulation on every GPU CUDA 13 supports
// (sm_75 and newer), so the ops hand bf16 operands to the GEMMs and attention as they are.
bool CudaKernels::multiplies_natively(DType dtype) const {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16;
}

// cuBLASLt's heuristic answers alike for the same shapes on the same GPU model, and the
// attention kernels have one tiling: no per-process choice for replicas to share.
int CudaKernels::replicated_choice(std::string& reason) {
  reason = "the CUDA backend makes no per-process choice";
  return 0;
}
void CudaKernels::adopt_replicated_choice(int, const std::string&) {}

}  // namespace cuda

Backend& cuda_kernels() {
  static auto* backend = new cuda::CudaKernels();
  return *backend;
}

}  // namespace wf::kernels
