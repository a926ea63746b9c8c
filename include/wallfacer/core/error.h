#pragma once
// Errors: every failure the framework reports is a wf::Error whose message names what was
// wrong (shapes, dtypes, devices, the offending key) and, where there is one, the fix.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace wf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace wf

// WF_CHECK(cond, "fmt {}", args...): throws wf::Error with the formatted message and the
// source location when cond is false. The message is only formatted on failure.
#define WF_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::wf::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                         \
  } while (0)

// WF_FAIL("fmt {}", args...): unconditional error.
#define WF_FAIL(...) ::wf::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
