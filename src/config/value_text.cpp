#include "wallfacer/config/value_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>

namespace wf::config {

std::string parse_integer(std::string_view text, std::int64_t min, std::int64_t max, std::int64_t& out) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return "is out of range";
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return "is not an integer";
  if (value < min || value > max) return "is out of range";
  out = value;
  return "";
}

std::string integer_expected(std::int64_t min, std::int64_t max) {
  if (max == std::numeric_limits<std::int64_t>::max()) return fmt::format("an integer >= {}", min);
  return fmt::format("an integer from {} to {}", min, max);
}

std::string parse_number(std::string_view text, double lo, bool lo_closed, double hi, bool hi_closed, double& out) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(value)) {
    return "is not a number";
  }
  const bool above = lo_closed ? value >= lo : value > lo;
  const bool below = hi_closed ? value <= hi : value < hi;
  if (!above || !below) return "is out of range";
  out = value;
  return "";
}

std::string number_expected(double lo, bool lo_closed, double hi, bool hi_closed) {
  std::string expected = fmt::format("a number {} {}", lo_closed ? ">=" : ">", lo);
  if (std::isfinite(hi)) expected += fmt::format(" and {} {}", hi_closed ? "<=" : "<", hi);
  return expected;
}

std::string parse_boolean(std::string_view text, bool& out) {
  for (std::string_view yes : {"true", "True", "TRUE", "yes", "Yes", "on", "On"}) {
    if (text == yes) return out = true, "";
  }
  for (std::string_view no : {"false", "False", "FALSE", "no", "No", "off", "Off"}) {
    if (text == no) return out = false, "";
  }
  return "is not a boolean";
}

std::string choices_expected(const std::vector<std::string>& names) {
  return fmt::format("one of {}", fmt::join(names, ", "));
}

std::string number_text(double value) { return fmt::format("{}", value); }

}  // namespace wf::config
