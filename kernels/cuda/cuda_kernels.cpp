// The CUDA kernel backend's identity and policies; its entries are defined by area in the files
// kernels/cuda/cuda_kernels.h names.
#include "kernels/cuda/cuda_kernels.h"

#include "kernels/builtin_backends.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/inventory.h"

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

std::vector<std::string> cuda_kernel_inventory() {
  return {
      "gemm: cuBLASLt (" + cuda_gemm_description() + "), bias epilogue for linear",
      "attention: flash-attention forward and backward with lse, causal/full, key windows, GQA (f32, f64 SIMT; "
      "bf16 on tensor cores through WMMA; on sm_90 bf16 forward and backward through wgmma, and cuDNN's fused attention, "
      "where the per-shape choice picks them), the lse merge and the sp pieces",
      "elementwise: broadcasting binary ops, GELU/SiLU/exp/ln/tanh and their backwards, dropout (Philox, the CPU's "
      "masks), bias and residual adds, scaling",
      "movement: gather, strided block copies, row selection, Ulysses message blocks",
      "reduce: sums, means, max/argmax, step totals, counts, gradient-norm clipping with the squares of all "
      "gradients in one launch (deterministic, no float atomics)",
      "norm: softmax and log-softmax, LayerNorm and RMSNorm forward/backward, each with the residual add fused in",
      "cross_entropy: fused softmax cross-entropy and the vocabulary-parallel partials",
      "embedding: embedding forward/backward (sorted, deterministic), RoPE, the QKV split with RoPE fused (qkv_rope)",
      "diffusion: noising, L_vb, timestep embedding",
      "optimizer: multi-tensor AdamW with f32 masters (one launch per parameter group), the update skipped on the "
      "device for a non-finite norm, EMA",
  };
}

}  // namespace cuda

Backend& cuda_kernels() {
  static auto* backend = new cuda::CudaKernels();
  return *backend;
}

}  // namespace wf::kernels
