// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::embedding_forward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                         std::int64_t vocab, const void* weight, const std::int64_t* ids, void* out) {
  WF_FAIL("cuda: embedding_forward is not implemented yet");
}

void CudaKernels::embedding_backward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                          std::int64_t vocab, const std::int64_t* ids, const void* dout, void* dweight) {
  WF_FAIL("cuda: embedding_backward is not implemented yet");
}

void CudaKernels::rope(const Stream& stream, DType dtype, const RopeShape& shape, const void* x,
            const std::int64_t* positions, bool inverse, void* y) {
  WF_FAIL("cuda: rope is not implemented yet");
}


}  // namespace wf::kernels::cuda
