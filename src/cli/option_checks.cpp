#include "src/cli/option_checks.h"

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

}  // namespace wf::cli
