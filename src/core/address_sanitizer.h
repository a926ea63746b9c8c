#pragma once
// Whether this translation unit is compiled with AddressSanitizer: GCC defines __SANITIZE_ADDRESS__,
// clang answers __has_feature(address_sanitizer). The CPU allocator starts with its cache off there
// (cpu_allocator.cpp), and the tests repeat less of the same code (tests/dist/train_testing.h
// parity_steps, tests/nn/module_testing.h).
namespace wf::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizerBuild = true;
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif

}  // namespace wf::detail
