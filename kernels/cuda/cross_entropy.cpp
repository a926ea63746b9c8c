// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::cross_entropy_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                             const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                             void* losses, void* lse, std::int64_t* count) {
  WF_FAIL("cuda: cross_entropy_forward is not implemented yet");
}

void CudaKernels::cross_entropy_reduce(const Stream& stream, DType dtype, std::int64_t rows, const void* losses,
                            const std::int64_t* count /*nullable*/, void* loss) {
  WF_FAIL("cuda: cross_entropy_reduce is not implemented yet");
}

void CudaKernels::cross_entropy_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                              const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                              const void* lse, const void* grad_loss, const std::int64_t* count,
                              void* dlogits, const void* row_grad) {
  WF_FAIL("cuda: cross_entropy_backward is not implemented yet");
}

void CudaKernels::vocab_parallel_row_max(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                              std::int64_t own, const void* x, double* max) {
  WF_FAIL("cuda: vocab_parallel_row_max is not implemented yet");
}

void CudaKernels::vocab_parallel_partials(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                               std::int64_t own, std::int64_t start, const void* x, const double* max,
                               const std::int64_t* targets, std::int64_t ignore_index, double* sums) {
  WF_FAIL("cuda: vocab_parallel_partials is not implemented yet");
}

void CudaKernels::vocab_parallel_loss(const Stream& stream, std::int64_t rows, const double* max, const double* sums,
                           const std::int64_t* targets, std::int64_t ignore_index,
                           const std::int64_t* count /*nullable*/, double* lse, double* loss) {
  WF_FAIL("cuda: vocab_parallel_loss is not implemented yet");
}

void CudaKernels::vocab_parallel_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                               std::int64_t own, std::int64_t start, const void* x,
                               const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                               const void* grad_loss, const std::int64_t* count, void* dx) {
  WF_FAIL("cuda: vocab_parallel_backward is not implemented yet");
}

void CudaKernels::vocab_parallel_local_ids(const Stream& stream, const char* what, std::int64_t n, std::int64_t vocab,
                                std::int64_t start, std::int64_t rows, const std::int64_t* ids,
                                std::int64_t* local, double* mask) {
  WF_FAIL("cuda: vocab_parallel_local_ids is not implemented yet");
}


}  // namespace wf::kernels::cuda
