#include "src/cli/option_checks.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

// Parses the option's text as a double (integers included) and applies `accept`.
template <typename Accept>
CLI::Validator number_check(std::string expected, const std::string& description, Accept accept) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double value = 0;
        if (CLI::detail::lexical_cast(input, value) && std::isfinite(value) && accept(value)) return "";
        return fmt::format("expected {}, got '{}'", expected, input);
      },
      description, description);
}

}  // namespace

CLI::Validator positive() {
  return number_check("a number > 0", "POSITIVE", [](double v) { return v > 0; });
}

CLI::Validator non_negative() {
  return number_check("a number >= 0", "NONNEGATIVE", [](double v) { return v >= 0; });
}

CLI::Validator output_file(std::string example) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        if (input.empty()) return fmt::format("an empty path names no file; give the file to write, e.g. {}", example);
        std::error_code ec;
        if (input.back() == '/' || std::filesystem::is_directory(input, ec)) {
          return fmt::format("'{}' is a directory; give the file to write in it, e.g. {}", input, example);
        }
        return "";
      },
      "FILE", "output_file");
}

void check_writable(const std::string& path, const char* option) {
  if (path.empty()) return;
  const bool existed = access(path.c_str(), F_OK) == 0;
  std::ofstream probe(path, std::ios::app);
  WF_USER_CHECK(probe.good(), "{} {}: cannot write the file (does its directory exist?)", option, path);
  probe.close();
  if (!existed) std::remove(path.c_str());
}

}  // namespace wf::cli
