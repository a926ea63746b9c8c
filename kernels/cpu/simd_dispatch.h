#pragma once
// Which SIMD width the kernels run, and the macros that compile a kernel once per x86 ISA and
// pick one at run time (kernels/cpu/simd.h has the lane helpers the kernels are written with;
// this header is apart so that code which only asks, like `wallfacer info`, does not take in
// simd.h's vector types and its -Wpsabi suppression).

namespace wf::kernels::cpu::simd {
// Lanes of the widest kernels to run: 16 (AVX-512F), 8 (AVX2 + FMA) or 4, as the CPU supports,
// capped by the environment variable WF_CPU_ISA=avx512|avx2|sse2 (read once; tests use it to run
// every variant on one machine). An unknown WF_CPU_ISA value is reported with a warning and ignored.
int lanes();
// Whether the CPU has AVX512_BF16 (vdpbf16ps: bf16 dot products with f32 accumulation), whatever
// WF_CPU_ISA says; callers that honour the cap also check lanes().
bool cpu_has_avx512_bf16();
}  // namespace wf::kernels::cpu::simd

// WF_SIMD_FOR_EACH_ISA(M) expands M(name, lanes, target) once per ISA the build can target, with
// name w4 / w8 / w16; WF_SIMD_TARGET(target) marks a function to compile for that ISA.
// WF_SIMD_PICK(prefix) chooses prefix##w16, prefix##w8 or prefix##w4 as simd::lanes() says.
#if defined(__x86_64__)
#define WF_SIMD_TARGET(isa) [[gnu::target(isa)]]
#define WF_SIMD_FOR_EACH_ISA(M) M(w4, 4, "sse2") M(w8, 8, "avx2,fma") M(w16, 16, "avx512f")
#define WF_SIMD_PICK(prefix)                                     \
  (::wf::kernels::cpu::simd::lanes() == 16  ? prefix##w16        \
   : ::wf::kernels::cpu::simd::lanes() == 8 ? prefix##w8 : prefix##w4)
#else
#define WF_SIMD_TARGET(isa)
#define WF_SIMD_FOR_EACH_ISA(M) M(w4, 4, "")
#define WF_SIMD_PICK(prefix) prefix##w4
#endif
