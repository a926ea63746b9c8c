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

// An error in what the user gave (a config key, a command-line argument, an input file) whose
// message names the input, the problem and the fix. It carries no source location: that helps
// whoever debugs an internal error, but after a message that already says what to change it is
// noise. Thrown by WF_USER_CHECK / WF_USER_FAIL; catch sites that take wf::Error take it too.
class UserError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
[[noreturn]] void throw_user_error(const std::string& message);
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

// WF_USER_CHECK / WF_USER_FAIL: as WF_CHECK / WF_FAIL, but throw wf::UserError, whose message
// has no source location. Only for messages that name the user's input and the fix.
#define WF_USER_CHECK(cond, ...)                                       \
  do {                                                                 \
    if (!(cond)) [[unlikely]] {                                        \
      ::wf::detail::throw_user_error(::fmt::format(__VA_ARGS__));      \
    }                                                                  \
  } while (0)
#define WF_USER_FAIL(...) ::wf::detail::throw_user_error(::fmt::format(__VA_ARGS__))
