#pragma once
// Config values as text: every key of a run config, whether it comes from YAML or --set, is read
// from its text by one of these, so a value is checked and reported the same way wherever it
// is given. Each parser returns "" when the text fits and stores the value, otherwise the
// problem ("is not an integer", "is out of range"), which the caller puts after the key and the
// text: "train.steps: 'ten' is not an integer; expected an integer >= 1".
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wf::config {

// An integer in [min, max], written in decimal.
std::string parse_integer(std::string_view text, std::int64_t min, std::int64_t max, std::int64_t& out);
// "an integer >= 1", "an integer from 1 to 65536" (max is INT64_MAX: no upper bound stated).
std::string integer_expected(std::int64_t min, std::int64_t max = std::numeric_limits<std::int64_t>::max());

// A finite real number in (lo, hi) with each end open or closed; hi = +inf for none.
std::string parse_number(std::string_view text, double lo, bool lo_closed, double hi, bool hi_closed, double& out);
std::string number_expected(double lo, bool lo_closed, double hi = std::numeric_limits<double>::infinity(),
                            bool hi_closed = false);

// true/false and YAML 1.1's other spellings (yes/no, on/off), which yaml-cpp reads as booleans.
std::string parse_boolean(std::string_view text, bool& out);
inline constexpr const char* kBooleanExpected = "true or false";

// One of a fixed set of names.
template <typename E>
using Choices = std::vector<std::pair<std::string, E>>;

template <typename E>
std::string parse_choice(std::string_view text, const Choices<E>& choices, E& out) {
  for (const auto& [name, value] : choices) {
    if (text == name) return out = value, "";
  }
  return "is not a valid choice";
}
template <typename E>
std::string choice_text(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return "?";
}
// "one of layernorm, rmsnorm"
std::string choices_expected(const std::vector<std::string>& names);
template <typename E>
std::string choices_expected(const Choices<E>& choices) {
  std::vector<std::string> names;
  for (const auto& entry : choices) names.push_back(entry.first);
  return choices_expected(names);
}

// How a real number is written back: the shortest text that reads back to the same double.
std::string number_text(double value);

}  // namespace wf::config
