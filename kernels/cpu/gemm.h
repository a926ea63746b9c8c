#pragma once
// Dense matrix products on the CPU: C = alpha·op(A)·op(B) + beta·C, row-major, with leading
// dimensions in elements so a caller can address a sub-block of a strided matrix (one head of
// an [n, h, d] tensor is a [n, d] matrix with ld = h*d).
//
// Threading: wallfacer owns parallelism through OpenMP and keeps OpenBLAS at one thread (see
// wallfacer/core/threading.h). A large product called outside a parallel region is split into
// panels of C, one per OpenMP thread, each computed by the single-threaded backend; called
// from inside a parallel region (e.g. a loop over heads) it simply runs on the calling thread.
// How the default backend is chosen, and the measurements behind it: docs/kernels-gemm.md.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/core/dtype.h"

namespace wf::kernels::cpu {

// cblas: OpenBLAS (f32 and f64). eigen: pure Eigen, the independent second implementation.
// onednn: oneDNN's dnnl_sgemm (f32; an f64 product asked of it runs on OpenBLAS).
enum class GemmBackend { cblas, eigen, onednn };
// "openblas", "eigen", "onednn": the names WF_CPU_GEMM takes.
const char* gemm_backend_name(GemmBackend backend);
// The backend a WF_CPU_GEMM value names ("openblas" or "cblas", "onednn", "eigen"), or nothing.
std::optional<GemmBackend> parse_gemm_backend(std::string_view name);
// Whether this build can run the backend (oneDNN is optional at build time).
bool gemm_backend_available(GemmBackend backend);

// The process's default backend and why it was chosen.
struct GemmChoice {
  GemmBackend backend = GemmBackend::cblas;
  std::string reason;  // e.g. "WF_CPU_GEMM=onednn", "measured at first use: onednn 112 GFLOP/s, openblas 15 ..."
};
// Decided once, at the first call: WF_CPU_GEMM when set (a wf::Error names the valid values
// otherwise), else the faster of oneDNN and OpenBLAS in a ~50 ms single-thread calibration on
// transformer-block shapes (gemm_select.cpp), else OpenBLAS when oneDNN is not built in.
GemmChoice gemm_choice();
// Replaces the decision: every rank of a job adopts rank 0's (comm::Runtime::init), because
// replicas of one computation must round alike.
void set_gemm_choice(GemmChoice choice);
// gemm_choice().backend, cheap after the first call: the default of gemm() and gemm_batched().
GemmBackend default_gemm_backend();
// Where measurements of this machine are kept ($WF_CACHE_DIR, else $XDG_CACHE_HOME/wallfacer, else
// ~/.cache/wallfacer; empty when none of them is set), and the key they are kept under (the CPU,
// OpenBLAS's core type, the oneDNN build): a file with another key was measured elsewhere.
std::filesystem::path machine_cache_dir();
std::string machine_cache_key();
// One measurement kept in a file of machine_cache_dir(): a first line, `key`, then `lines`.
// read_machine_cache gives the `count` lines after the key when the file holds `key` (nullopt when
// the file is missing, unreadable, short or another key's); write_machine_cache replaces the file
// atomically and ignores failure (a read-only home or a full disk: the next process measures again).
std::optional<std::vector<std::string>> read_machine_cache(const std::filesystem::path& file, const std::string& key,
                                                           std::size_t count);
void write_machine_cache(const std::filesystem::path& file, const std::string& key,
                         const std::vector<std::string>& lines);

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

// bf16 operands, f32 accumulation and result: C[M, N] (f32) = alpha·op(A)·op(B) + beta·C, with
// gemm()'s layout, threading and contract. Runs oneDNN's bf16 GEMM where gemm_bf16_native(),
// else widens the operands to f32 (exact) and runs `backend`'s f32 product: the results agree
// to f32 rounding either way.
void gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc, GemmBackend backend = default_gemm_backend());
// Whether bf16 products run natively: oneDNN built in, a CPU with AVX512_BF16, and WF_CPU_ISA
// not capping the kernels below avx512 (how tests force the f32 fallback).
bool gemm_bf16_native();
// How gemm_bf16 runs here, in words (`wallfacer info`).
const char* gemm_bf16_path();
// The triple loop over the widened operands, accumulating in double: gemm_bf16's oracle.
void gemm_bf16_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                         const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                         std::int64_t ldc);

// The obviously-correct triple loop, accumulating in double; the oracle for the tests.
template <class T>
void gemm_reference(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                    T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta,
                    T* C, std::int64_t ldc);

}  // namespace wf::kernels::cpu
