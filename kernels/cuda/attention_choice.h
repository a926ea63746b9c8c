#pragma once
// Which bf16 attention runs on a CUDA GPU, per shape: the project's own flash-attention kernels
// (attention.cu: SIMT and WMMA, every GPU), cuDNN's fused attention (cudnn_attention.h) or, on
// Hopper, the sm_90 kernels (sm90/attention.h). Free of CUDA's headers: the
// CLI includes it for `wallfacer info` without the toolkit's include path.
//
// The setting, from the environment variable WF_ATTENTION_BACKEND (read once per process):
//   auto (default): at the first call of a shape and direction that cuDNN or the sm_90 kernels may
//     run (cudnn_attention_refusal, and no d_lse in a backward; sm90_attention_refusal), the own kernel
//     and each of them run on the call's own inputs into scratch outputs, each timed with CUDA
//     events (one warm-up, then the mean of three runs), and each one's outputs are compared with
//     the own kernel's: where they differ beyond bf16's tolerance (max |theirs - own| > 0.02 *
//     max |own| + 1e-3 over o and lse, 0.05 * ... + 1e-3 over each gradient, on up to 2^20 sampled
//     elements; a -inf must match exactly), that implementation is disabled for the shape with a
//     warning logged once. The fastest verified one is cached and runs every later call; the first
//     call's results are the own kernel's. The measurement waits on the host once per shape.
//   own: neither.  cudnn, sm90: that one wherever it takes the shape, unmeasured and unverified.
// The sm_90 kernels have not run on a GPU yet: under auto they are candidates only when
// WF_ATTENTION_SM90=1 (a kernel that faults would end the process, not just lose the comparison),
// until a device check has passed their tests (docs/gpu.md).
#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "wallfacer/core/stream.h"

namespace wf::kernels::cuda {

// The routes CudaKernels::attention_forward / attention_backward take for bf16 operands (shape
// checked, scale resolved): true when the call's outputs are written here (by cuDNN, or at a
// first use by the own kernel after the measurement); false when the caller runs its own kernel.
bool attention_forward_by_choice(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                                 const void* v, float* o, float* lse);
bool attention_backward_by_choice(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                                  const void* v, const float* o, const float* lse, const void* d_o, float* dq,
                                  float* dk, float* dv, bool accumulate, const void* d_lse);

enum class AttentionBackendSetting { automatic, own, cudnn, sm90 };
// WF_ATTENTION_BACKEND parsed (unset or empty: automatic); wf::Error naming the valid values otherwise.
AttentionBackendSetting parse_attention_backend(const char* value);
AttentionBackendSetting attention_backend_setting();
// WF_ATTENTION_SM90 parsed: 1 or on: the sm_90 kernels are candidates under auto; unset, empty, 0 or
// off: they are not; wf::Error naming the valid values otherwise.
bool parse_sm90_switch(const char* value);
// Whether the sm_90 kernels may run: WF_ATTENTION_SM90 (read once per process) or
// WF_ATTENTION_BACKEND=sm90.
bool sm90_attention_enabled();

// One cached choice: the shape and direction, what runs it, the timings (ms; negative where not
// measured) and why.
struct AttentionChoice {
  std::string shape;
  std::string which;  // "own", "cudnn" or "sm90"
  double own_ms = -1, cudnn_ms = -1, sm90_ms = -1;
  std::string reason;
};
std::vector<AttentionChoice> attention_choices();
// What runs a bf16 call of this shape and direction on `device` under the choices made so far:
// "own", "cudnn" or "sm90"; "own" too where no other implementation takes the shape (no choice is
// made then); "" when one may but the shape has not been called yet.
std::string attention_choice_for(int device, const AttentionShape& shape, bool backward);
// The same, one line each, for `wallfacer info`.
std::vector<std::string> attention_choice_lines();

// "9.19.0 (compiled in; WF_ATTENTION_BACKEND auto)", or why cuDNN is not used.
std::string cudnn_attention_info();

}  // namespace wf::kernels::cuda
