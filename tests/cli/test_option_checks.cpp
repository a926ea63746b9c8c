// src/cli/option_checks.h: number checks whose messages are readable (no 309-digit bounds) and
// that refuse nan and inf.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "src/cli/option_checks.h"

using Catch::Matchers::Contains;

namespace {

// CLI11's message for `args` given to an app with one option checked by `check`, or "".
template <typename T>
std::string parse_error(const CLI::Validator& check, std::vector<std::string> args) {
  CLI::App app("test");
  T value{};
  app.add_option("--x", value)->check(check);
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("option checks: positive and non_negative refuse nan, inf and out-of-range values", "[cli][option_checks]") {
  CHECK(parse_error<double>(wf::cli::positive(), {"0.5", "--x"}).empty());
  CHECK(parse_error<int>(wf::cli::positive(), {"3", "--x"}).empty());
  CHECK(parse_error<double>(wf::cli::non_negative(), {"0", "--x"}).empty());
  for (const std::string bad : {"nan", "inf", "-inf", "-1", "abc"}) {
    INFO(bad);
    const std::string message = parse_error<double>(wf::cli::non_negative(), {bad, "--x"});
    CHECK(message == "--x: expected a number >= 0, got '" + bad + "'");
  }
  CHECK(parse_error<int>(wf::cli::positive(), {"0", "--x"}) == "--x: expected a number > 0, got '0'");
}

TEST_CASE("option checks: in_range prints its bounds as given", "[cli][option_checks]") {
  const auto world = wf::cli::in_range(1, 1 << 20, "the cap");
  CHECK(parse_error<int>(world, {"1048576", "--x"}).empty());
  CHECK(parse_error<int>(world, {"1048577", "--x"}) == "--x: expected an integer from 1 to 1048576, got '1048577'; the cap");
  CHECK_THAT(parse_error<int>(world, {"99999999999", "--x"}), Contains("got '99999999999'"));
  const auto fraction = wf::cli::in_range(0.0, 0.99);
  CHECK(parse_error<double>(fraction, {"0.5", "--x"}).empty());
  CHECK(parse_error<double>(fraction, {"nan", "--x"}) == "--x: expected a number from 0 to 0.99, got 'nan'");
  const auto tokens = wf::cli::in_range(std::int64_t{1}, std::int64_t{1000000});
  CHECK(parse_error<std::int64_t>(tokens, {"0", "--x"}) == "--x: expected an integer from 1 to 1000000, got '0'");
}

TEST_CASE("option checks: output_file refuses an empty path and a directory, naming an example",
          "[cli][option_checks]") {
  const auto out = wf::cli::output_file("--out samples.png");
  CHECK(parse_error<std::string>(out, {"grid.png", "--x"}).empty());
  CHECK(parse_error<std::string>(out, {"", "--x"}) ==
        "--x: an empty path names no file; give the file to write, e.g. --out samples.png");
  CHECK(parse_error<std::string>(out, {"/tmp", "--x"}) ==
        "--x: '/tmp' is a directory; give the file to write in it, e.g. --out samples.png");
  CHECK_THAT(parse_error<std::string>(out, {"runs/", "--x"}), Contains("'runs/' is a directory"));
  // A file in a directory that does not exist: refused before the work, by check_writable.
  CHECK_THROWS_WITH(wf::cli::check_writable("/no-such-dir/grid.png", "--out"),
                    "--out /no-such-dir/grid.png: cannot write the file (does its directory exist?)");
  CHECK_NOTHROW(wf::cli::check_writable("", "--out"));
}
