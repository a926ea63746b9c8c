#include "kernels/cpu/simd_dispatch.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "wallfacer/core/log.h"

namespace wf::kernels::cpu::simd {
namespace {

int supported_lanes() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#endif
  return 4;
}

// An unknown value is reported and ignored rather than thrown: the first kernel to ask may run
// inside an OpenMP region, where an exception would terminate the process.
int requested_lanes() {
  const char* env = std::getenv("WF_CPU_ISA");
  if (env == nullptr || *env == '\0') return 16;
  const std::string_view isa(env);
  if (isa == "avx512") return 16;
  if (isa == "avx2") return 8;
  if (isa == "sse2") return 4;
  log::warn("ignoring WF_CPU_ISA='{}': not an ISA level; use avx512, avx2 or sse2 (or unset it for the widest the CPU "
            "runs)",
            isa);
  return 16;
}

}  // namespace

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

int lanes() {
  static const int picked = std::min(supported_lanes(), requested_lanes());
  return picked;
}

}  // namespace wf::kernels::cpu::simd
