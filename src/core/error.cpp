#include "wallfacer/core/error.h"

#include <cstring>

namespace wf::detail {

void throw_error(const char* file, int line, const std::string& message) {
  // Keep only the file name: full build paths make messages noisy and machine-specific.
  const char* base = std::strrchr(file, '/');
  throw Error(fmt::format("{} ({}:{})", message, base ? base + 1 : file, line));
}

void throw_user_error(const std::string& message) { throw UserError(message); }

}  // namespace wf::detail
