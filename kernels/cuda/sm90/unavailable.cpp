// The sm_90 attention kernels' entries in a build whose WF_CUDA_ARCHITECTURES lacks 90: the kernels
// (attention_forward.cu, attention_backward.cu: sm_90a code) are not compiled, and the refusal says so.
#include "kernels/cuda/sm90/attention.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

std::string sm90_attention_refusal(int /*device*/, const AttentionShape& /*shape*/, const void* /*q*/,
                                   const void* /*k*/, const void* /*v*/) {
  return "not built: WF_CUDA_ARCHITECTURES has no 90 (the sm_90 kernels are sm_90a code)";
}

void launch_attention_forward_sm90(cudaStream_t /*stream*/, const AttentionShape& /*shape*/,
                                   const __nv_bfloat16* /*q*/, const __nv_bfloat16* /*k*/,
                                   const __nv_bfloat16* /*v*/, float* /*o*/, float* /*lse*/) {
  WF_FAIL("the sm_90 attention forward is not built (WF_CUDA_ARCHITECTURES has no 90)");
}

void launch_attention_backward_sm90(cudaStream_t /*stream*/, const AttentionShape& /*shape*/,
                                    const __nv_bfloat16* /*q*/, const __nv_bfloat16* /*k*/,
                                    const __nv_bfloat16* /*v*/, const float* /*o*/, const float* /*lse*/,
                                    const __nv_bfloat16* /*d_o*/, float* /*dq*/, float* /*dk*/, float* /*dv*/,
                                    bool /*accumulate*/, const float* /*d_lse*/, float* /*minus_delta*/) {
  WF_FAIL("the sm_90 attention backward is not built (WF_CUDA_ARCHITECTURES has no 90)");
}

}  // namespace wf::kernels::cuda
