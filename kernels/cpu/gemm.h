#pragma once
// Dense matrix products on the CPU: C = alpha·op(A)·op(B) + beta·C, row-major, with leading
// dimensions in elements so a caller can address a sub-block of a strided matrix (one head of
// an [n, h, d] tensor is a [n, d] matrix with ld = h*d).
//
// Threading: wallfacer owns parallelism through OpenMP and keeps OpenBLAS at one thread (see
// wallfacer/core/threading.h). A large product called outside a parallel region is split into
// panels of C, one per OpenMP thread, each computed by the single-threaded backend; called
// from inside a parallel region (e.g. a loop over heads) it simply runs on the calling thread.
// The measured choice of default backend is written up in docs/kernels-gemm.md.
#include <cstdint>

namespace wf::kernels::cpu {

enum class GemmBackend { cblas, eigen };

// OpenBLAS (cblas) ran ~2.8x faster than Eigen single-threaded on f32 1024³ and 2048³ products
// (100–107 vs 38 GFLOP/s; docs/kernels-gemm.md).
constexpr GemmBackend default_gemm_backend() { return GemmBackend::cblas; }
const char* gemm_backend_name(GemmBackend backend);

// Row-major C[M, N] = alpha·op(A)·op(B) + beta·C, where op(A) is [M, K] and op(B) is [K, N].
// A is stored [M, K] (or [K, M] when trans_a), B is stored [K, N] (or [N, K] when trans_b).
// Any of M, N, K may be 0; K == 0 (or alpha == 0) gives C = beta·C without reading A or B.
// beta == 0 overwrites C, so C may hold garbage (even NaN) on entry. C must not overlap A or B.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
          std::int64_t ldc, GemmBackend backend = default_gemm_backend());

// `batch` independent products; operand i starts at X + i*stride_x. A stride of 0 broadcasts
// that operand (e.g. one weight matrix against a batch of activations); stride_c must not be
// 0 when batch > 1, and the C matrices must not overlap each other.
template <class T>
void gemm_batched(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t M, std::int64_t N,
                  std::int64_t K, T alpha, const T* A, std::int64_t lda, std::int64_t stride_a,
                  const T* B, std::int64_t ldb, std::int64_t stride_b, T beta, T* C,
                  std::int64_t ldc, std::int64_t stride_c,
                  GemmBackend backend = default_gemm_backend());

// The obviously-correct triple loop, accumulating in double; the oracle for the tests.
template <class T>
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta,
                    T* C, std::int64_t ldc);

}  // namespace wf::kernels::cpu
