// Eigen must not start its own OpenMP team: wallfacer splits large products into panels itself
// and calls Eigen on each panel, exactly as it does with single-threaded OpenBLAS.
#define EIGEN_DONT_PARALLELIZE

#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/simd_dispatch.h"

#include <cblas.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace wf::kernels::cpu {
namespace {

// Below this many multiply-adds a product is not worth waking OpenMP threads for (~50 µs of
// single-core work), and panels thinner than this many rows/columns pack poorly.
constexpr std::int64_t kParallelMacs = std::int64_t{1} << 21;
constexpr std::int64_t kMinPanel = 32;

// One product's geometry, validated once and then handed to the backends unchanged. In is the
// operands' type, Out the result's and the scalars' (bf16 operands give f32 results).
template <class In, class Out = In>
struct GemmArgs {
  bool trans_a, trans_b;
  std::int64_t M, N, K;
  Out alpha;
  const In* A;
  std::int64_t lda;
  const In* B;
  std::int64_t ldb;
  Out beta;
  Out* C;
  std::int64_t ldc;
};

template <class Args>
void check_gemm_args(const char* who, const Args& g, bool check_pointers = true) {
  WF_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "{}: sizes must be non-negative, got M={} N={} K={}",
           who, g.M, g.N, g.K);
  // Row-major storage: a matrix stored [rows, cols] needs ld >= cols. (An empty matrix may pass
  // ld = 0; such products never reach a backend, so BLAS's ld >= 1 rule does not apply.)
  const std::int64_t a_cols = g.trans_a ? g.M : g.K;
  const std::int64_t b_cols = g.trans_b ? g.K : g.N;
  WF_CHECK(g.lda >= a_cols,
           "{}: lda={} is smaller than the {} columns of A as stored (trans_a={}, M={}, K={}); "
           "pass lda >= {}",
           who, g.lda, a_cols, g.trans_a, g.M, g.K, a_cols);
  WF_CHECK(g.ldb >= b_cols,
           "{}: ldb={} is smaller than the {} columns of B as stored (trans_b={}, K={}, N={}); "
           "pass ldb >= {}",
           who, g.ldb, b_cols, g.trans_b, g.K, g.N, b_cols);
  WF_CHECK(g.ldc >= g.N, "{}: ldc={} is smaller than the N={} columns of C; pass ldc >= {}", who,
           g.ldc, g.N, g.N);
  if (!check_pointers) return;
  const bool reads_ab = g.M > 0 && g.N > 0 && g.K > 0;
  WF_CHECK(!reads_ab || (g.A != nullptr && g.B != nullptr),
           "{}: A or B is null for a non-empty product (M={} N={} K={})", who, g.M, g.N, g.K);
  WF_CHECK(g.M == 0 || g.N == 0 || g.C != nullptr, "{}: C is null for a non-empty [{}, {}] result",
           who, g.M, g.N);
}

// C = beta·C, with BLAS semantics: beta == 0 overwrites (never 0·NaN).
template <class Args>
void scale_c(const Args& g) {
  using T = std::remove_pointer_t<decltype(g.C)>;
  if (g.beta == T(1)) return;
  for (std::int64_t i = 0; i < g.M; ++i) {
    T* row = g.C + i * g.ldc;
    if (g.beta == T(0)) {
      std::fill(row, row + g.N, T(0));
    } else {
      for (std::int64_t j = 0; j < g.N; ++j) row[j] *= g.beta;
    }
  }
}

template <class T>
void gemm_cblas(const GemmArgs<T>& g) {
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  // OpenBLAS takes int (LP64); validate() has made sure nothing overflows.
  const auto i = [](std::int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, i(g.M), i(g.N), i(g.K), g.alpha, g.A, i(g.lda), g.B,
                i(g.ldb), g.beta, g.C, i(g.ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, i(g.M), i(g.N), i(g.K), g.alpha, g.A, i(g.lda), g.B,
                i(g.ldb), g.beta, g.C, i(g.ldc));
  }
}

template <class T>
void gemm_eigen(const GemmArgs<T>& g) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  using MutMap = Eigen::Map<Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  const ConstMap a(g.A, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, Eigen::OuterStride<>(g.lda));
  const ConstMap b(g.B, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, Eigen::OuterStride<>(g.ldb));
  MutMap c(g.C, g.M, g.N, Eigen::OuterStride<>(g.ldc));
  scale_c(g);
  const auto accumulate = [&](const auto& op_a, const auto& op_b) { c.noalias() += g.alpha * op_a * op_b; };
  if (g.trans_a && g.trans_b) accumulate(a.transpose(), b.transpose());
  else if (g.trans_a) accumulate(a.transpose(), b);
  else if (g.trans_b) accumulate(a, b.transpose());
  else accumulate(a, b);
}

// oneDNN threads a call itself unless it is made inside an OpenMP parallel region; a product
// that reaches it outside one (too small for panels) is pinned to the calling thread, like the
// other backends.
template <class T>
void gemm_onednn(const GemmArgs<T>& g) {
  if constexpr (std::is_same_v<T, float>) {
    const ScopedNumThreads one_thread(1);
    onednn_sgemm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc);
  } else {
    init_blas_threads();
    gemm_cblas(g);  // oneDNN has no f64 GEMM: the f64 (accuracy) path stays on OpenBLAS
  }
}

// One product on the calling thread. Degenerate shapes never reach a backend so all agree.
template <class T>
void gemm_on_this_thread(const GemmArgs<T>& g, GemmBackend backend) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0 || g.alpha == T(0)) return scale_c(g);
  switch (backend) {
    case GemmBackend::cblas:
      init_blas_threads();
      return gemm_cblas(g);
    case GemmBackend::eigen: return gemm_eigen(g);
    case GemmBackend::onednn: return gemm_onednn(g);
  }
}

// The stored matrix X ([rows, cols] with leading dimension ld) widened to a dense f32 copy.
std::vector<float> widened(const bf16* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(i * cols + j)] = bf16_to_float(x[i * ld + j]);
  }
  return out;
}

// bf16 operands, f32 result: oneDNN's bf16 GEMM where the CPU multiplies bf16 natively
// (AVX512_BF16: vdpbf16ps, or AMX), else the operands widened to f32 — exactly, every bf16 is
// an f32 — and the f32 product of `backend`. Both accumulate in f32, so the two paths agree to
// f32 rounding.
void gemm_on_this_thread(const GemmArgs<bf16, float>& g, GemmBackend backend) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0 || g.alpha == 0.0f) return scale_c(g);
  if (gemm_bf16_native()) {
    const ScopedNumThreads one_thread(1);
    return onednn_gemm_bf16(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc);
  }
  const std::int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const std::int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  const std::vector<float> a = widened(g.A, a_rows, a_cols, g.lda), b = widened(g.B, b_rows, b_cols, g.ldb);
  gemm_on_this_thread(GemmArgs<float>{g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, a.data(), a_cols, b.data(),
                                      b_cols, g.beta, g.C, g.ldc},
                      backend);
}

// The sub-product that computes C[rows r0:r1) (or columns, when split_rows is false).
template <class Args>
Args panel(const Args& g, bool split_rows, std::int64_t begin, std::int64_t end) {
  Args p = g;
  if (split_rows) {
    p.M = end - begin;
    p.A = g.trans_a ? g.A + begin : g.A + begin * g.lda;  // rows of op(A)
    p.C = g.C + begin * g.ldc;
  } else {
    p.N = end - begin;
    p.B = g.trans_b ? g.B + begin * g.ldb : g.B + begin;  // columns of op(B)
    p.C = g.C + begin;
  }
  return p;
}

// Splits C into one panel per thread along its longer side. Each element of C is still
// computed by exactly one call, on one thread, in a fixed order for a given thread count.
template <class Args>
void gemm_in_panels(const Args& g, GemmBackend backend) {
  const double macs = double(g.M) * double(g.N) * double(g.K);
  const bool split_rows = g.M >= g.N;
  const std::int64_t extent = split_rows ? g.M : g.N;
  const std::int64_t panels =
      std::min<std::int64_t>(omp_get_max_threads(), (extent + kMinPanel - 1) / kMinPanel);
  if (macs < double(kParallelMacs) || panels <= 1 || omp_in_parallel()) {
    return gemm_on_this_thread(g, backend);
  }
  if (backend == GemmBackend::cblas) init_blas_threads();  // before threads race to call it
#pragma omp parallel for schedule(static) num_threads(panels)
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t begin = extent * p / panels;
    const std::int64_t end = extent * (p + 1) / panels;
    gemm_on_this_thread(panel(g, split_rows, begin, end), backend);
  }
}

// cblas takes 32-bit sizes; refuse anything that would silently wrap.
void check_fits_blas_int(const char* who, std::int64_t v, const char* name) {
  WF_CHECK(v <= std::int64_t{2147483647}, "{}: {}={} exceeds the 32-bit range of the BLAS interface",
           who, name, v);
}

template <class Args>
void validate(const char* who, const Args& g, bool check_pointers = true) {
  check_gemm_args(who, g, check_pointers);
  check_fits_blas_int(who, g.M, "M");
  check_fits_blas_int(who, g.N, "N");
  check_fits_blas_int(who, g.K, "K");
  check_fits_blas_int(who, g.lda, "lda");
  check_fits_blas_int(who, g.ldb, "ldb");
  check_fits_blas_int(who, g.ldc, "ldc");
}

// An operand element in double: exact for f32, f64 and bf16 alike.
double as_double(bf16 x) { return bf16_to_float(x); }
template <class T>
double as_double(T x) {
  return double(x);
}

// The obviously-correct triple loop of the references, accumulating in double.
template <class Args>
void reference_product(const char* who, const Args& g) {
  using Out = std::remove_pointer_t<decltype(g.C)>;
  check_gemm_args(who, g);
  for (std::int64_t i = 0; i < g.M; ++i) {
    for (std::int64_t j = 0; j < g.N; ++j) {
      double acc = 0.0;
      for (std::int64_t k = 0; k < g.K; ++k) {
        const double a = as_double(g.trans_a ? g.A[k * g.lda + i] : g.A[i * g.lda + k]);
        const double b = as_double(g.trans_b ? g.B[j * g.ldb + k] : g.B[k * g.ldb + j]);
        acc += a * b;
      }
      Out& c = g.C[i * g.ldc + j];
      const double prior = g.beta == Out(0) ? 0.0 : double(g.beta) * double(c);
      c = static_cast<Out>(double(g.alpha) * acc + prior);
    }
  }
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
          std::int64_t ldc, GemmBackend backend) {
  const GemmArgs<T> g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  validate("gemm", g);
  gemm_in_panels(g, backend);
}

template <class T>
void gemm_batched(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t M, std::int64_t N,
                  std::int64_t K, T alpha, const T* A, std::int64_t lda, std::int64_t stride_a,
                  const T* B, std::int64_t ldb, std::int64_t stride_b, T beta, T* C,
                  std::int64_t ldc, std::int64_t stride_c, GemmBackend backend) {
  WF_CHECK(batch >= 0, "gemm_batched: batch must be non-negative, got {}", batch);
  const GemmArgs<T> g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  validate("gemm_batched", g, /*check_pointers=*/batch > 0);
  WF_CHECK(stride_a >= 0 && stride_b >= 0 && stride_c >= 0,
           "gemm_batched: strides must be non-negative (0 broadcasts), got stride_a={} "
           "stride_b={} stride_c={}",
           stride_a, stride_b, stride_c);
  if (batch == 0 || M == 0 || N == 0) return;
  // Distinct batches write distinct C matrices; overlapping ones would race.
  const std::int64_t c_span = (M - 1) * ldc + N;
  WF_CHECK(batch == 1 || stride_c >= c_span,
           "gemm_batched: stride_c={} makes the {} C matrices overlap (each spans {} elements "
           "for M={}, N={}, ldc={}); pass stride_c >= {}",
           stride_c, batch, c_span, M, N, ldc, c_span);

  const auto item = [&](std::int64_t i) {
    GemmArgs<T> gi = g;
    gi.A = A == nullptr ? nullptr : A + i * stride_a;
    gi.B = B == nullptr ? nullptr : B + i * stride_b;
    gi.C = C + i * stride_c;
    return gi;
  };
  const double macs = double(batch) * double(M) * double(N) * double(K);
  // Enough batches to keep every thread busy: one whole product per thread, no panels.
  if (batch >= omp_get_max_threads() && macs >= double(kParallelMacs) && !omp_in_parallel()) {
    if (backend == GemmBackend::cblas) init_blas_threads();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < batch; ++i) gemm_on_this_thread(item(i), backend);
  } else {
    for (std::int64_t i = 0; i < batch; ++i) gemm_in_panels(item(i), backend);
  }
}

template <class T>
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta,
                    T* C, std::int64_t ldc) {
  reference_product("gemm_reference", GemmArgs<T>{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc});
}

bool gemm_bf16_native() {
  // AVX512_BF16 is what makes bf16 products faster than f32 ones; WF_CPU_ISA below avx512 (a
  // test's way to run the fallback on any machine) turns it off like the other wide kernels.
  static const bool native = onednn_available() && simd::cpu_has_avx512_bf16() && simd::lanes() == 16;
  return native;
}

const char* gemm_bf16_path() {
  if (gemm_bf16_native()) return "onednn bf16 GEMM (AVX512_BF16), f32 accumulation";
  return "f32 (operands widened: no AVX512_BF16, oneDNN absent, or WF_CPU_ISA below avx512)";
}

void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc, GemmBackend backend) {
  const GemmArgs<bf16, float> g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  validate("gemm_bf16", g);
  gemm_in_panels(g, backend);
}

void gemm_bf16_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                         const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                         std::int64_t ldc) {
  reference_product("gemm_bf16_reference",
                    GemmArgs<bf16, float>{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc});
}

#define WF_INSTANTIATE_GEMM(T)                                                                   \
  template void gemm<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t, T, const T*,      \
                        std::int64_t, const T*, std::int64_t, T, T*, std::int64_t, GemmBackend); \
  template void gemm_batched<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t,           \
                                std::int64_t, T, const T*, std::int64_t, std::int64_t, const T*, \
                                std::int64_t, std::int64_t, T, T*, std::int64_t, std::int64_t,  \
                                GemmBackend);                                                    \
  template void gemm_reference<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t, T,      \
                                  const T*, std::int64_t, const T*, std::int64_t, T, T*,        \
                                  std::int64_t);
WF_INSTANTIATE_GEMM(float)
WF_INSTANTIATE_GEMM(double)
#undef WF_INSTANTIATE_GEMM

}  // namespace wf::kernels::cpu
