// The sm_90 attention forward's entries in a build whose WF_CUDA_ARCHITECTURES lacks 90: the kernel
// (attention_forward.cu, sm_90a code) is not compiled, and the refusal says so.
#include "kernels/cuda/sm90/attention_forward.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

std::string sm90_attention_refusal(int /*device*/, const AttentionShape& /*shape*/, const void* /*q*/,
                                   const void* /*k*/, const void* /*v*/) {
  return "not built: WF_CUDA_ARCHITECTURES has no 90 (the sm_90 kernel is sm_90a code)";
}

void launch_attention_forward_sm90(cudaStream_t /*stream*/, const AttentionShape& /*shape*/,
                                   const __nv_bfloat16* /*q*/, const __nv_bfloat16* /*k*/,
                                   const __nv_bfloat16* /*v*/, float* /*o*/, float* /*lse*/) {
  WF_FAIL("the sm_90 attention forward is not built (WF_CUDA_ARCHITECTURES has no 90)");
}

}  // namespace wf::kernels::cuda
