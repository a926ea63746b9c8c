#include "kernels/cpu/gemm_onednn.h"

#include <cstdint>
#include <string>

#include "wallfacer/core/error.h"

#if WF_HAVE_ONEDNN
#include <dnnl.h>

// oneDNN's bf16 GEMM: exported by libdnnl (DNNL_API) beside dnnl_sgemm, with the same row-major
// contract, but declared only in its own tests' headers — so declared here, as TensorFlow's and
// PyTorch's oneDNN integrations do. Like dnnl_sgemm it generates its kernels once per process
// (AVX512_BF16's vdpbf16ps, or AMX tiles), so a new shape costs no JIT: a matmul primitive would
// compile one per shape, and the attention tiles come in many.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const std::uint16_t* A, dnnl_dim_t lda,
                                               const std::uint16_t* B, dnnl_dim_t ldb, float beta, float* C,
                                               dnnl_dim_t ldc);
#endif

namespace wf::kernels::cpu {

#if WF_HAVE_ONEDNN

namespace {

const char* status_name(dnnl_status_t status) {
  switch (status) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_runtime_error: return "runtime error";
    default: return "error";
  }
}

}  // namespace

bool onednn_available() { return true; }

const char* onednn_info() {
  static const std::string info = [] {
    const dnnl_version_t* v = dnnl_version();
    const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other";
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           " (cpu runtime: " + runtime + ")";
  }();
  return info.c_str();
}

void onednn_sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                  const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
                  std::int64_t ldc) {
  // dnnl_sgemm is row-major (unlike BLAS's Fortran sgemm), with 64-bit sizes.
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                          beta, C, ldc);
  WF_CHECK(status == dnnl_success, "oneDNN dnnl_sgemm failed ({}) for M={} N={} K={} lda={} ldb={} ldc={}",
           status_name(status), M, N, K, lda, ldb, ldc);
}

void onednn_gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                      const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                      std::int64_t ldc) {
  static_assert(sizeof(bf16) == sizeof(std::uint16_t), "wf::bf16 is oneDNN's bfloat16_t: 16 bits");
  const dnnl_status_t status =
      dnnl_gemm_bf16bf16f32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                            reinterpret_cast<const std::uint16_t*>(A), lda, reinterpret_cast<const std::uint16_t*>(B),
                            ldb, beta, C, ldc);
  WF_CHECK(status == dnnl_success, "oneDNN dnnl_gemm_bf16bf16f32 failed ({}) for M={} N={} K={} lda={} ldb={} ldc={}",
           status_name(status), M, N, K, lda, ldb, ldc);
}

#else  // !WF_HAVE_ONEDNN

bool onednn_available() { return false; }
const char* onednn_info() { return "not built (install libdnnl-dev and reconfigure)"; }

void onednn_sgemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                  const float*, std::int64_t, float, float*, std::int64_t) {
  WF_FAIL("the oneDNN GEMM backend is not built into this wallfacer (install libdnnl-dev, reconfigure and "
          "rebuild), or choose another with WF_CPU_GEMM=openblas");
}

void onednn_gemm_bf16(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const bf16*, std::int64_t,
                      const bf16*, std::int64_t, float, float*, std::int64_t) {
  WF_FAIL("the oneDNN bf16 GEMM is not built into this wallfacer (install libdnnl-dev, reconfigure and rebuild)");
}

#endif

}  // namespace wf::kernels::cpu
