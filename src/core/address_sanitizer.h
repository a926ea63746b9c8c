#pragma once
// Whether this translation unit is compiled with AddressSanitizer: GCC defines __SANITIZE_ADDRESS__,
// clang answers __has_feature(address_sanitizer). The CPU allocator starts with its cache off there
// (cpu_allocator.cpp), and the tests repeat less of the same code (tests/dist/train_testing.h
// parity_steps, tests/nn/module_testing.h).
#if defined(__SANITIZE_ADDRESS__)
#define WF_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WF_ADDRESS_SANITIZER 1
#endif
#endif

#ifdef WF_ADDRESS_SANITIZER
#include <sanitizer/lsan_interface.h>
#endif

namespace wf::detail {

#ifdef WF_ADDRESS_SANITIZER
inline constexpr bool kAddressSanitizerBuild = true;
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif

// While one is alive, what this thread allocates is never reported as a leak (LeakSanitizer's
// __lsan_disable; what those blocks point to counts as reachable). For third-party code that
// keeps its allocations until the process exits: Open MPI's initialisation and finalisation
// (comm/runtime.cpp). Without it, its leaks could be told apart only by the library names deep in
// their allocation stacks, which needs ASAN_OPTIONS=fast_unwind_on_malloc=0, a slow unwind at
// every malloc that made the sanitizer pass's tests two to three times slower.
class IgnoreLeaksHere {
 public:
  IgnoreLeaksHere() {
#ifdef WF_ADDRESS_SANITIZER
    __lsan_disable();
#endif
  }
  ~IgnoreLeaksHere() {
#ifdef WF_ADDRESS_SANITIZER
    __lsan_enable();
#endif
  }
  IgnoreLeaksHere(const IgnoreLeaksHere&) = delete;
  IgnoreLeaksHere& operator=(const IgnoreLeaksHere&) = delete;
};

}  // namespace wf::detail
