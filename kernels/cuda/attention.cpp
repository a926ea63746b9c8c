// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::attention_forward(const Stream& stream, DType operands, const AttentionShape& shape, const void* q,
                         const void* k, const void* v, void* o, void* lse) {
  WF_FAIL("cuda: attention_forward is not implemented yet");
}

void CudaKernels::attention_backward(const Stream& stream, DType operands, const AttentionShape& shape,
                          const void* q, const void* k, const void* v, const void* o, const void* lse,
                          const void* d_o, void* dq, void* dk, void* dv, bool accumulate,
                          const void* d_lse) {
  WF_FAIL("cuda: attention_backward is not implemented yet");
}

void CudaKernels::attention_merge(const Stream& stream, DType dtype, std::int64_t batch, std::int64_t q_len,
                       std::int64_t heads, std::int64_t head_dim, void* o, void* lse, const void* o_i,
                       const void* lse_i) {
  WF_FAIL("cuda: attention_merge is not implemented yet");
}

void CudaKernels::team_lse_combine(const Stream& stream, DType dtype, int members, std::int64_t rows, int member,
                        const void* all, void* lse_star, void* weight) {
  WF_FAIL("cuda: team_lse_combine is not implemented yet");
}

void CudaKernels::scale_attention_rows(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                            std::int64_t h, std::int64_t d, void* o, const void* weight) {
  WF_FAIL("cuda: scale_attention_rows is not implemented yet");
}

void CudaKernels::attention_minus_delta(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                             std::int64_t h, std::int64_t d, const void* d_o, const void* o,
                             const void* d_lse, void* out) {
  WF_FAIL("cuda: attention_minus_delta is not implemented yet");
}


}  // namespace wf::kernels::cuda
