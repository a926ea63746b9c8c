// The cross-entropy entries of the CUDA backend: the CPU's argument checks on the host, the
// kernels of kernels/cuda/cross_entropy.cu on the stream. Targets are data: a bad one is found by
// the kernel and raised at the next host synchronisation (kernels/cuda/data_error.h) with the
// CPU's message.
#include <fmt/format.h>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/data_error.h"
#include "kernels/cuda/dispatch.h"

namespace wf::kernels::cuda {
namespace {

// kernels/cpu/cross_entropy.cpp's checked_target_count: its size check, and its message for a
// target that the kernel finds outside the vocabulary.
DataError checked_targets(const Stream& stream, const char* what, std::int64_t rows, std::int64_t vocab,
                          std::int64_t ignore_index) {
  WF_CHECK(rows >= 0 && vocab >= 0, "{}: sizes must be non-negative, got rows={} vocab={}", what, rows, vocab);
  return bad_target_error(stream, what, vocab, ignore_index);
}

// kernels/cpu/vocab_parallel.cpp's check of a rank's shard.
void check_shard(const char* what, std::int64_t rows, std::int64_t k, std::int64_t own) {
  WF_CHECK(rows >= 0 && k >= 0 && own >= 0 && own <= k,
           "{}: need rows >= 0 and 0 <= own <= k, got rows={} k={} own={}", what, rows, k, own);
}

}  // namespace

void CudaKernels::cross_entropy_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                                        const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                                        void* losses, void* lse, std::int64_t* count) {
  const DataError error = checked_targets(stream, "cross_entropy_forward", rows, vocab, ignore_index);
  dispatch_floating(dtype, "cross_entropy", [&](auto t) {
    using T = decltype(t);
    launch_cross_entropy_forward<T>(native(stream), rows, vocab, static_cast<const T*>(logits), targets, ignore_index,
                                    static_cast<T*>(losses), static_cast<T*>(lse), count, error.record,
                                    error.message);
  });
}

void CudaKernels::cross_entropy_reduce(const Stream& stream, DType dtype, std::int64_t rows, const void* losses,
                                       const std::int64_t* count, void* loss) {
  WF_CHECK(rows >= 0, "cross_entropy_reduce: need rows >= 0, got {}", rows);
  dispatch_floating(dtype, "cross_entropy", [&](auto t) {
    using T = decltype(t);
    launch_cross_entropy_reduce<T>(native(stream), rows, static_cast<const T*>(losses), count, static_cast<T*>(loss));
  });
}

void CudaKernels::cross_entropy_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                                         const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                                         const void* lse, const void* grad_loss, const std::int64_t* count,
                                         void* dlogits, const void* row_grad) {
  const DataError error = checked_targets(stream, "cross_entropy_backward", rows, vocab, ignore_index);
  dispatch_floating(dtype, "cross_entropy_backward", [&](auto t) {
    using T = decltype(t);
    launch_cross_entropy_backward<T>(native(stream), rows, vocab, static_cast<const T*>(logits), targets,
                                     ignore_index, static_cast<const T*>(lse), static_cast<const T*>(grad_loss),
                                     count, static_cast<T*>(dlogits), static_cast<const T*>(row_grad), error.record,
                                     error.message);
  });
}

void CudaKernels::vocab_parallel_row_max(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                         std::int64_t own, const void* x, double* max) {
  check_shard("vocab_parallel_row_max", rows, k, own);
  dispatch_floating(dtype, "vocab_parallel_cross_entropy", [&](auto t) {
    using T = decltype(t);
    launch_vocab_parallel_row_max<T>(native(stream), rows, k, own, static_cast<const T*>(x), max);
  });
}

void CudaKernels::vocab_parallel_partials(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                          std::int64_t own, std::int64_t start, const void* x, const double* max,
                                          const std::int64_t* targets, std::int64_t ignore_index, double* sums) {
  check_shard("vocab_parallel_partials", rows, k, own);
  dispatch_floating(dtype, "vocab_parallel_cross_entropy", [&](auto t) {
    using T = decltype(t);
    launch_vocab_parallel_partials<T>(native(stream), rows, k, own, start, static_cast<const T*>(x), max, targets,
                                      ignore_index, sums);
  });
}

void CudaKernels::vocab_parallel_loss(const Stream& stream, std::int64_t rows, const double* max, const double* sums,
                                      const std::int64_t* targets, std::int64_t ignore_index,
                                      const std::int64_t* count, double* lse, double* loss) {
  WF_CHECK(rows >= 0, "vocab_parallel_loss: rows must be non-negative, got {}", rows);
  launch_vocab_parallel_loss(native(stream), rows, max, sums, targets, ignore_index, count, lse, loss);
}

void CudaKernels::vocab_parallel_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                          std::int64_t own, std::int64_t start, const void* x,
                                          const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                                          const void* grad_loss, const std::int64_t* count, void* dx) {
  check_shard("vocab_parallel_backward", rows, k, own);
  dispatch_floating(dtype, "vocab_parallel_cross_entropy_backward", [&](auto t) {
    using T = decltype(t);
    launch_vocab_parallel_backward<T>(native(stream), rows, k, own, start, static_cast<const T*>(x), targets,
                                      ignore_index, lse, static_cast<const T*>(grad_loss), count, static_cast<T*>(dx));
  });
}

void CudaKernels::vocab_parallel_local_ids(const Stream& stream, const char* what, std::int64_t n, std::int64_t vocab,
                                           std::int64_t start, std::int64_t rows, const std::int64_t* ids,
                                           std::int64_t* local, double* mask) {
  WF_CHECK(n >= 0 && vocab >= 0 && rows >= 0, "{}: sizes must be non-negative, got n={} vocab={} rows={}", what, n,
           vocab, rows);
  const DataError error =
      data_error(stream, fmt::format("{}: id {{1}} at flat index {{0}} is outside [0, {})", what, vocab));
  launch_vocab_parallel_local_ids(native(stream), n, vocab, start, rows, ids, local, mask, error.record,
                                  error.message);
}

}  // namespace wf::kernels::cuda
