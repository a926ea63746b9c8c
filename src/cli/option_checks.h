#pragma once
// Checks of command-line options whose messages a person can read. CLI11's own
// PositiveNumber and NonNegativeNumber print their bound, DBL_MAX, with all 309 digits
// ("Value -1 not in range 0.000000 to 17976931348623157081...") and, like CLI::Range on a
// double, let "nan" through (no comparison with NaN is true).
//
//   command->add_option("--iters", o.iters, "...")->check(positive());
//   command->add_option("--world", o.world, "...")->check(in_range(1, 1 << 20, "the most ranks ..."));
//
// A value that passes the check but does not fit the option's type (1.5 or 1e30 for an int) is
// then refused by CLI11's conversion, which names the option and the value.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>

namespace wf::cli {

// A finite number > 0.
CLI::Validator positive();
// A finite number >= 0.
CLI::Validator non_negative();

// A finite T from min to max inclusive; the bounds are printed as given. `why`, when given, is
// appended to the message (e.g. where a cap comes from).
template <typename T>
CLI::Validator in_range(T min, T max, std::string why = "") {
  static_assert(std::is_arithmetic_v<T>);
  const std::string expected = fmt::format("{} from {} to {}", std::is_integral_v<T> ? "an integer" : "a number", min, max);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T value{};
        bool ok = CLI::detail::lexical_cast(input, value) && value >= min && value <= max;
        if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(value);
        if (ok) return "";
        return fmt::format("expected {}, got '{}'{}", expected, input, why.empty() ? "" : "; " + why);
      },
      fmt::format("in [{}, {}]", min, max), "in_range");
}

// A file the command writes (--out FILE.png): a path, not "" (which CLI11 takes as a value) nor a
// directory; `example` is named in the message ("--out samples.png").
CLI::Validator output_file(std::string example);

// A wf::UserError naming `option` when `path` cannot be written (checked before minutes of
// measuring or sampling, not after); nothing for an empty path. Leaves no file it created.
void check_writable(const std::string& path, const char* option);

}  // namespace wf::cli
