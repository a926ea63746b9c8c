// gemm / gemm_batched against the double-accumulating triple loop, for every backend.
//
// Tolerance: |C - C_ref| <= rtol · (|alpha|·|op(A)|·|op(B)| + |beta|·|C0|) elementwise, the
// standard bound for a dot product, with rtol = 1e-5 for f32 and 1e-12 for f64.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace cpu = wf::kernels::cpu;
using cpu::GemmBackend;

namespace {

using namespace wf::testing;

template <class T>
std::vector<T> abs_of(std::vector<T> v) {
  for (T& x : v) x = std::abs(x);
  return v;
}

// One product over padded buffers: A, B, C each live in a larger row-major matrix with `pad`
// extra columns, so every call also exercises leading dims larger than the logical width.
struct Case {
  bool trans_a, trans_b;
  std::int64_t M, N, K;
  std::int64_t pad = 0;
  double alpha = 1.0, beta = 0.0;
};

// Runs one case with `backend` and checks it element by element, including that C's padding
// columns were left alone.
template <class T>
void check_case(const Case& c, GemmBackend backend, std::uint64_t seed) {
  const std::int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const std::int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  const std::int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const auto A = randn<T, std::mt19937_64>(a_rows * lda, seed);
  const auto B = randn<T, std::mt19937_64>(b_rows * ldb, seed + 1);
  const auto C0 = randn<T, std::mt19937_64>(c.M * ldc, seed + 2);
  const T alpha = T(c.alpha), beta = T(c.beta);

  auto C = C0;
  if (c.beta == 0.0) {  // beta == 0 must overwrite, never propagate what C held
    for (std::int64_t i = 0; i < c.M; ++i)
      for (std::int64_t j = 0; j < c.N; ++j) C[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
  }
  auto ref = C0;
  auto bound = abs_of(C0);
  cpu::gemm<T>(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta,
               C.data(), ldc, backend);
  cpu::gemm_reference<T>(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb,
                         beta, ref.data(), ldc);
  const auto absA = abs_of(A), absB = abs_of(B);
  cpu::gemm_reference<T>(c.trans_a, c.trans_b, c.M, c.N, c.K, std::abs(alpha), absA.data(), lda,
                         absB.data(), ldb, std::abs(beta), bound.data(), ldc);

  INFO("backend=" << cpu::gemm_backend_name(backend) << " trans_a=" << c.trans_a << " trans_b="
                  << c.trans_b << " M=" << c.M << " N=" << c.N << " K=" << c.K << " pad=" << c.pad
                  << " alpha=" << c.alpha << " beta=" << c.beta);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < c.M; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * ldc + j);
      if (j >= c.N) {
        bad += C[at] != C0[at];  // padding untouched, bit for bit
      } else {
        const double err = std::abs(double(C[at]) - double(ref[at]));
        bad += !(err <= kTolerance<T> * double(bound[at]) + 1e-30);
      }
    }
  }
  CHECK(bad == 0);
}

// Every backend this build has: oneDNN is optional at build time (CI installs it).
const std::vector<GemmBackend> kBackends = [] {
  std::vector<GemmBackend> backends{GemmBackend::cblas, GemmBackend::eigen};
  if (cpu::gemm_backend_available(GemmBackend::onednn)) backends.push_back(GemmBackend::onednn);
  return backends;
}();

}  // namespace

TEMPLATE_TEST_CASE("gemm matches the reference on small, odd and empty shapes", "[kernels][gemm]",
                   float, double) {
  const std::int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5},  {33, 17, 65}, {64, 64, 64},
                                    {0, 5, 3}, {4, 0, 3},   {4, 5, 0},    {0, 0, 0},
                                    {1, 31, 9}, {29, 1, 17}, {3, 4, 1}};
  std::uint64_t seed = 100;
  for (GemmBackend backend : kBackends)
    for (const auto& s : shapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (std::int64_t pad : {0, 3}) {
            check_case<TestType>({ta, tb, s[0], s[1], s[2], pad, 1.0, 0.0}, backend, seed++);
          }
}

TEMPLATE_TEST_CASE("gemm applies alpha and beta", "[kernels][gemm]", float, double) {
  const double scalars[][2] = {{1.0, 1.0}, {-0.5, 2.0}, {0.0, 0.75}, {2.5, 0.0}, {0.0, 0.0}};
  std::uint64_t seed = 200;
  for (GemmBackend backend : kBackends)
    for (const auto& ab : scalars)
      for (bool ta : {false, true}) {
        check_case<TestType>({ta, !ta, 9, 11, 7, 2, ab[0], ab[1]}, backend, seed++);
        check_case<TestType>({ta, ta, 5, 6, 0, 1, ab[0], ab[1]}, backend, seed++);  // K == 0: C = beta·C
      }
}

TEMPLATE_TEST_CASE("gemm split into panels over threads matches the reference", "[kernels][gemm]",
                   float, double) {
  ThreadCountGuard threads(2);
  std::uint64_t seed = 300;
  // Above the parallel threshold (2^21 multiply-adds): row panels when M >= N, else column
  // panels; the transposes check that each panel addresses its slice of op(A) / op(B).
  for (GemmBackend backend : kBackends)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_case<TestType>({ta, tb, 131, 97, 170, 1, 1.0, 0.5}, backend, seed++);
        check_case<TestType>({ta, tb, 37, 450, 128, 2, -1.0, 0.0}, backend, seed++);
      }
}

TEMPLATE_TEST_CASE("gemm addresses a head of a [n, h, d] tensor through leading dims",
                   "[kernels][gemm]", float, double) {
  // S = Q_h · K_hᵀ for head 1 of q, k with shape [n, h, d]: both are [n, d] with ld = h·d.
  const std::int64_t n = 10, h = 3, d = 4, head = 1;
  const auto q = randn<TestType, std::mt19937_64>(n * h * d, 1);
  const auto k = randn<TestType, std::mt19937_64>(n * h * d, 2);
  std::vector<TestType> s(static_cast<std::size_t>(n * n)), ref(static_cast<std::size_t>(n * n));
  cpu::gemm<TestType>(false, true, n, n, d, TestType(1), q.data() + head * d, h * d,
                      k.data() + head * d, h * d, TestType(0), s.data(), n);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t e = 0; e < d; ++e) acc += double(q[i * h * d + head * d + e]) * k[j * h * d + head * d + e];
      ref[static_cast<std::size_t>(i * n + j)] = TestType(acc);
    }
  for (std::size_t i = 0; i < s.size(); ++i) CHECK(s[i] == Approx(ref[i]).epsilon(kTolerance<TestType> * 10).margin(1e-6));
}

TEMPLATE_TEST_CASE("gemm_batched matches a loop of reference products", "[kernels][gemm]", float,
                   double) {
  ThreadCountGuard threads(2);
  struct BatchCase {
    std::int64_t batch, M, N, K;
    bool broadcast_a, broadcast_b, ta, tb;
  };
  // The 96^3 x 4 cases exceed the threshold and run one whole product per thread.
  const BatchCase cases[] = {{3, 5, 7, 4, true, false, false, false}, {3, 5, 7, 4, false, true, true, false},
                             {4, 6, 3, 9, false, false, false, true}, {1, 4, 4, 4, false, false, true, true},
                             {0, 4, 4, 4, false, false, false, false}, {2, 0, 3, 3, false, false, false, false},
                             {4, 96, 96, 96, true, false, false, true}, {5, 96, 80, 96, false, false, true, false}};
  std::uint64_t seed = 400;
  for (GemmBackend backend : kBackends)
    for (const auto& c : cases) {
      const std::int64_t lda = (c.ta ? c.M : c.K) + 1, ldb = (c.tb ? c.K : c.N) + 2, ldc = c.N + 1;
      const std::int64_t a_size = (c.ta ? c.K : c.M) * lda, b_size = (c.tb ? c.N : c.K) * ldb;
      const std::int64_t c_size = c.M * ldc;
      const std::int64_t stride_a = c.broadcast_a ? 0 : a_size + 5, stride_b = c.broadcast_b ? 0 : b_size;
      const auto A = randn<TestType, std::mt19937_64>(std::max<std::int64_t>(1, c.batch) * (a_size + 5), seed++);
      const auto B = randn<TestType, std::mt19937_64>(std::max<std::int64_t>(1, c.batch) * b_size, seed++);
      const auto C0 = randn<TestType, std::mt19937_64>(c.batch * c_size, seed++);
      auto C = C0, ref = C0;
      const TestType alpha = TestType(0.75), beta = TestType(-0.5);
      cpu::gemm_batched<TestType>(c.ta, c.tb, c.batch, c.M, c.N, c.K, alpha, A.data(), lda, stride_a,
                                  B.data(), ldb, stride_b, beta, C.data(), ldc, c_size, backend);
      for (std::int64_t i = 0; i < c.batch; ++i) {
        cpu::gemm_reference<TestType>(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data() + i * stride_a, lda,
                                      B.data() + i * stride_b, ldb, beta, ref.data() + i * c_size, ldc);
      }
      INFO("backend=" << cpu::gemm_backend_name(backend) << " batch=" << c.batch << " M=" << c.M
                      << " N=" << c.N << " K=" << c.K);
      double worst = 0;
      for (std::size_t i = 0; i < C.size(); ++i)
        worst = std::max(worst, std::abs(double(C[i]) - double(ref[i])) / (1.0 + std::abs(double(ref[i]))));
      // Values here are O(sqrt(K)) ≤ 10, so this relative-plus-absolute check is the bound above.
      CHECK(worst <= kTolerance<TestType> * 10 * std::sqrt(double(std::max<std::int64_t>(1, c.K))));
    }
}

TEST_CASE("gemm rejects impossible arguments with a message", "[kernels][gemm]") {
  std::vector<float> a(64), b(64), c(64);
  // lda smaller than the 4 columns of A.
  CHECK_THROWS_WITH(cpu::gemm<float>(false, false, 4, 4, 4, 1.f, a.data(), 3, b.data(), 4, 0.f, c.data(), 4),
                    Catch::Contains("lda=3"));
  CHECK_THROWS_AS(cpu::gemm<float>(false, true, 4, 4, 4, 1.f, a.data(), 4, b.data(), 2, 0.f, c.data(), 4), wf::Error);
  CHECK_THROWS_AS(cpu::gemm<float>(false, false, 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 3), wf::Error);
  CHECK_THROWS_AS(cpu::gemm<float>(false, false, -1, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4), wf::Error);
  CHECK_THROWS_AS(cpu::gemm<float>(false, false, 4, 4, 4, 1.f, nullptr, 4, b.data(), 4, 0.f, c.data(), 4), wf::Error);
  // Two batches writing the same C would race.
  CHECK_THROWS_WITH(cpu::gemm_batched<float>(false, false, 2, 2, 2, 2, 1.f, a.data(), 2, 4, b.data(), 2, 4, 0.f,
                                             c.data(), 2, 0),
                    Catch::Contains("stride_c=0"));
  CHECK_THROWS_AS(cpu::gemm_batched<float>(false, false, 2, 2, 2, 2, 1.f, a.data(), 2, -4, b.data(), 2, 4, 0.f,
                                           c.data(), 2, 4),
                  wf::Error);
}

TEST_CASE("GEMM backends: names, availability and the process's choice", "[kernels][gemm]") {
  for (GemmBackend backend : {GemmBackend::cblas, GemmBackend::eigen, GemmBackend::onednn}) {
    CHECK(cpu::parse_gemm_backend(cpu::gemm_backend_name(backend)) == backend);
  }
  CHECK(cpu::parse_gemm_backend("cblas") == GemmBackend::cblas);
  CHECK_FALSE(cpu::parse_gemm_backend("mkl").has_value());
  if (!cpu::gemm_backend_available(GemmBackend::onednn)) {
    WARN("this build has no oneDNN (apt-get install libdnnl-dev): its GEMM cases did not run");
    CHECK_THROWS_WITH(cpu::set_gemm_choice({GemmBackend::onednn, "test"}), Catch::Contains("libdnnl-dev"));
  }
  // The first decision (WF_CPU_GEMM or a measurement) names its reason; a replacement holds
  // until the next one, and gemm() without a backend follows it.
  const cpu::GemmChoice first = cpu::gemm_choice();
  CHECK_FALSE(first.reason.empty());
  CHECK(cpu::gemm_backend_available(first.backend));
  for (GemmBackend backend : kBackends) {
    cpu::set_gemm_choice({backend, "test"});
    CHECK(cpu::default_gemm_backend() == backend);
    CHECK(cpu::gemm_choice().reason == "test");
    check_case<float>({false, true, 40, 24, 16, 1, 1.0, 0.5}, cpu::default_gemm_backend(), 900);
  }
  cpu::set_gemm_choice(first);
}

// Hidden benchmark (run with `test_kernels "[.bench]"`): single-threaded GFLOP/s of both
// backends at 1024 and 2048, f32, then the default backend with every OpenMP thread.
// The numbers behind default_gemm_backend() are in docs/kernels-gemm.md.
TEST_CASE("gemm backends benchmark", "[.bench][kernels][gemm]") {
  const auto gflops = [](std::int64_t n, GemmBackend backend, int reps) {
    const auto A = randn<float, std::mt19937_64>(n * n, 1), B = randn<float, std::mt19937_64>(n * n, 2);
    std::vector<float> C(static_cast<std::size_t>(n * n));
    const auto run = [&] {
      cpu::gemm<float>(false, false, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n, backend);
    };
    run();  // warm up: page in buffers, let OpenBLAS allocate its workspace
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 2.0 * double(n) * double(n) * double(n) / best * 1e-9;
  };
  std::printf("BLAS: %s\n", wf::blas_info());
  {
    ThreadCountGuard threads(1);
    for (std::int64_t n : {1024, 2048})
      for (GemmBackend backend : kBackends)
        std::printf("f32 %lld^3, 1 thread, %-5s: %7.1f GFLOP/s\n", static_cast<long long>(n),
                    cpu::gemm_backend_name(backend), gflops(n, backend, n > 1024 ? 3 : 5));
  }
  for (std::int64_t n : {1024, 2048})
    std::printf("f32 %lld^3, %d threads, %-5s: %7.1f GFLOP/s\n", static_cast<long long>(n),
                wf::num_threads(), cpu::gemm_backend_name(cpu::default_gemm_backend()),
                gflops(n, cpu::default_gemm_backend(), 3));
}

// ---- bf16 operands, f32 accumulation --------------------------------------------------------
// Oracle: the triple loop over the widened operands in double. Every bf16 is exactly an f32 and
// every product of two is exact in f32, so the only error left is f32 accumulation: the f32
// bound above, rtol 1e-5. The native path (oneDNN, AVX512_BF16) and the widened fallback
// (WF_CPU_ISA=avx2: the kernels_simd_avx2 entry) must both meet it.
namespace {

std::vector<wf::bf16> to_bf16(const std::vector<float>& x) {
  std::vector<wf::bf16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = wf::float_to_bf16(x[i]);
  return out;
}
std::vector<float> widen(const std::vector<wf::bf16>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = std::abs(wf::bf16_to_float(x[i]));
  return out;
}

void check_bf16_case(const Case& c, std::uint64_t seed) {
  const std::int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const std::int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  const std::int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const auto A = to_bf16(randn<float, std::mt19937_64>(a_rows * lda, seed));
  const auto B = to_bf16(randn<float, std::mt19937_64>(b_rows * ldb, seed + 1));
  const auto C0 = randn<float, std::mt19937_64>(c.M * ldc, seed + 2);
  const float alpha = float(c.alpha), beta = float(c.beta);
  auto C = C0, ref = C0, bound = abs_of(C0);
  if (c.beta == 0.0) {
    for (std::int64_t i = 0; i < c.M; ++i)
      for (std::int64_t j = 0; j < c.N; ++j) C[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
  }
  cpu::gemm_bf16(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  cpu::gemm_bf16_reference(c.trans_a, c.trans_b, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta,
                           ref.data(), ldc);
  const auto absA = widen(A), absB = widen(B);
  cpu::gemm_reference<float>(c.trans_a, c.trans_b, c.M, c.N, c.K, std::abs(alpha), absA.data(), lda, absB.data(), ldb,
                             std::abs(beta), bound.data(), ldc);
  INFO("path=" << cpu::gemm_bf16_path() << " trans_a=" << c.trans_a << " trans_b=" << c.trans_b << " M=" << c.M
               << " N=" << c.N << " K=" << c.K << " pad=" << c.pad << " alpha=" << c.alpha << " beta=" << c.beta);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < c.M; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * ldc + j);
      if (j >= c.N) {
        bad += C[at] != C0[at];
      } else {
        bad += !(std::abs(double(C[at]) - double(ref[at])) <= 1e-5 * double(bound[at]) + 1e-30);
      }
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("gemm_bf16 matches the widened double reference", "[kernels][gemm][gemm_bf16]") {
  // Which path runs: native exactly when oneDNN is built in, the CPU has AVX512_BF16 and
  // WF_CPU_ISA does not cap the kernels below avx512.
  CHECK(cpu::gemm_bf16_native() == (cpu::gemm_backend_available(GemmBackend::onednn) &&
                                    cpu::simd::cpu_has_avx512_bf16() && cpu::simd::lanes() == 16));
  WARN("gemm_bf16 runs: " << cpu::gemm_bf16_path());
  std::uint64_t seed = 1000;
  const std::int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {64, 64, 64}, {0, 5, 3}, {4, 5, 0}, {3, 4, 1}};
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (std::int64_t pad : {0, 3}) check_bf16_case({ta, tb, s[0], s[1], s[2], pad, 1.0, 0.0}, seed++);
  for (const auto& ab : {std::pair{-0.5, 2.0}, std::pair{0.0, 0.75}, std::pair{2.5, 0.0}, std::pair{1.0, 1.0}})
    for (bool ta : {false, true}) check_bf16_case({ta, !ta, 9, 11, 7, 2, ab.first, ab.second}, seed++);
  // Above the panel threshold, two threads: row and column panels.
  ThreadCountGuard threads(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_bf16_case({ta, tb, 131, 97, 170, 1, 1.0, 0.5}, seed++);
      check_bf16_case({ta, tb, 37, 450, 128, 2, -1.0, 0.0}, seed++);
    }
}
