#pragma once
// Whether this test binary is built with AddressSanitizer (scripts/test.sh's second pass). There
// the tests look for memory and UB errors, which every code path reaches with the first few
// iterations of a loop: the helpers that repeat the same code many times for numbers (finite
// differences over many elements, optimizer steps) repeat it less, and Release checks every number.
namespace wf::test {

#if defined(__SANITIZE_ADDRESS__)
#define WF_TEST_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WF_TEST_SANITIZED_BUILD 1
#endif
#endif

#ifdef WF_TEST_SANITIZED_BUILD
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace wf::test
