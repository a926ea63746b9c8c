// STUB: replaced by the area's implementation.
#include "kernels/cuda/cuda_kernels.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {

void CudaKernels::sum_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
               const void* x, void* out) {
  WF_FAIL("cuda: sum_dim is not implemented yet");
}

void CudaKernels::mean_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                std::int64_t inner, const void* x, void* out) {
  WF_FAIL("cuda: mean_dim is not implemented yet");
}

void CudaKernels::max_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
               const void* x, void* values, std::int64_t* argmax /*nullable*/) {
  WF_FAIL("cuda: max_dim is not implemented yet");
}

void CudaKernels::max_dim_backward(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                        std::int64_t inner, const void* grad, const std::int64_t* argmax, void* dx) {
  WF_FAIL("cuda: max_dim_backward is not implemented yet");
}

void CudaKernels::reduce_broadcast(const Stream& stream, DType dtype, const void* grad,
                        const std::vector<std::int64_t>& out_shape, void* result,
                        const std::vector<std::int64_t>& in_shape) {
  WF_FAIL("cuda: reduce_broadcast is not implemented yet");
}

void CudaKernels::sum_of_products(const Stream& stream, DType dtype, std::int64_t n, const void* x, const void* y,
                       double* out) {
  WF_FAIL("cuda: sum_of_products is not implemented yet");
}

void CudaKernels::count_not_equal(const Stream& stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                       std::int64_t* out) {
  WF_FAIL("cuda: count_not_equal is not implemented yet");
}

void CudaKernels::loss_normaliser(const Stream& stream, const double* totals, double* out) {
  WF_FAIL("cuda: loss_normaliser is not implemented yet");
}

void CudaKernels::count_targets(const Stream& stream, const char* what, std::int64_t rows, std::int64_t vocab,
                     const std::int64_t* targets, std::int64_t ignore_index, std::int64_t* count) {
  WF_FAIL("cuda: count_targets is not implemented yet");
}

void CudaKernels::clip_coefficient(const Stream& stream, std::int64_t parts, const double* sq_sums, double max_norm,
                        double* norm, double* coefficient) {
  WF_FAIL("cuda: clip_coefficient is not implemented yet");
}

void CudaKernels::replica_spread(const Stream& stream, std::int64_t n, const std::vector<std::int64_t>& ends,
                      const double* extremes, const double* own, double* out) {
  WF_FAIL("cuda: replica_spread is not implemented yet");
}


}  // namespace wf::kernels::cuda
