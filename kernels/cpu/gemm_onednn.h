#pragma once
// oneDNN (libdnnl) as a GEMM backend: its dnnl_sgemm picks AVX-512 (or AVX2) kernels from the CPU
// itself, so it runs at the machine's rate where OpenBLAS falls back to old kernels (a CPU newer
// than the OpenBLAS build, or OPENBLAS_CORETYPE forcing an older core). docs/kernels-gemm.md has
// the measurements.
//
// Built only when CMake finds oneDNN (WF_HAVE_ONEDNN=1); without it onednn_available() is false
// and the product functions throw a wf::Error that says so.
#include <cstdint>

#include "wallfacer/core/dtype.h"

namespace wf::kernels::cpu {

bool onednn_available();
// "oneDNN 2.6.3 (cpu: OpenMP, isa: avx512_core_amx)", or why it is absent.
const char* onednn_info();

// Row-major C = alpha·op(A)·op(B) + beta·C in f32 on the calling thread (dnnl_sgemm; oneDNN
// runs sequentially inside an OpenMP parallel region, and gemm.cpp pins it to one thread outside
// one). Same contract as gemm(): the caller has validated sizes and leading dimensions.
void onednn_sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                  const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
                  std::int64_t ldc);

// The same with bf16 operands and an f32 result, accumulated in f32 (oneDNN's bf16 GEMM:
// vdpbf16ps, or AMX tiles where the CPU has them; kernels generated once per process).
void onednn_gemm_bf16(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                      const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                      std::int64_t ldc);

}  // namespace wf::kernels::cpu
