// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::gather(const Stream& stream, std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
              const std::vector<std::int64_t>& src_stride, void* dst) {
  WF_FAIL("cuda: gather is not implemented yet");
}

void CudaKernels::copy_blocks(const Stream& stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                   std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                   std::int64_t outer, std::int64_t count) {
  WF_FAIL("cuda: copy_blocks is not implemented yet");
}

void CudaKernels::select_rows(const Stream& stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                   std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                   void* out) {
  WF_FAIL("cuda: select_rows is not implemented yet");
}

void CudaKernels::ulysses_block(const Stream& stream, const UlyssesBlock& block, void* tensor, void* message) {
  WF_FAIL("cuda: ulysses_block is not implemented yet");
}


}  // namespace wf::kernels::cuda
