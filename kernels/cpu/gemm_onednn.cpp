#include "kernels/cpu/gemm_onednn.h"

#include <map>
#include <string>
#include <tuple>

#include "wallfacer/core/error.h"

#if WF_HAVE_ONEDNN
#include <dnnl.h>

#include <dnnl.hpp>
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

// One bf16 product's geometry: what a matmul primitive is built for.
using MatmulKey = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t, float, float>;

// Row-major [rows, cols] with the given strides: a transposed operand is the stored matrix
// read with its strides swapped, so no copy is ever made.
dnnl::memory::desc strided(std::int64_t rows, std::int64_t cols, std::int64_t row_stride, std::int64_t col_stride,
                           dnnl::memory::data_type type) {
  return dnnl::memory::desc({rows, cols}, type, dnnl::memory::dims{row_stride, col_stride});
}

struct BoundMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
};

BoundMatmul build_matmul(const MatmulKey& key, const dnnl::engine& engine) {
  const auto& [trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta] = key;
  using dt = dnnl::memory::data_type;
  const auto a = trans_a ? strided(M, K, 1, lda, dt::bf16) : strided(M, K, lda, 1, dt::bf16);
  const auto b = trans_b ? strided(K, N, 1, ldb, dt::bf16) : strided(K, N, ldb, 1, dt::bf16);
  const auto c = strided(M, N, ldc, 1, dt::f32);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);  // C = alpha·A·B + beta·C, in f32
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
  return {dnnl::matmul(pd), a, b, c};
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
  // Per thread: a primitive's scratchpad is its own, so two threads must not run one at once.
  thread_local dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  thread_local dnnl::stream stream(engine);
  thread_local std::map<MatmulKey, BoundMatmul> built;
  const MatmulKey key{trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  auto found = built.find(key);
  try {
    if (found == built.end()) found = built.emplace(key, build_matmul(key, engine)).first;
    const BoundMatmul& m = found->second;
    // oneDNN reads through non-const handles; the operands are only read.
    dnnl::memory a(m.a, engine, const_cast<bf16*>(A)), b(m.b, engine, const_cast<bf16*>(B)), c(m.c, engine, C);
    m.primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  } catch (const dnnl::error& e) {
    WF_FAIL("oneDNN bf16 matmul failed ({}) for M={} N={} K={} lda={} ldb={} ldc={}", e.what(), M, N, K, lda, ldb,
            ldc);
  }
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
