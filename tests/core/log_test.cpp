// Log levels: names parse, unknown names are errors that list the valid ones, and the level
// filters what is enabled.
#include <catch2/catch.hpp>

#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

using Catch::Contains;
using wf::log::Level;

TEST_CASE("log levels parse by name", "[core]") {
  CHECK(wf::log::parse_level("trace") == Level::trace);
  CHECK(wf::log::parse_level("debug") == Level::debug);
  CHECK(wf::log::parse_level("info") == Level::info);
  CHECK(wf::log::parse_level("warn") == Level::warn);
  CHECK(wf::log::parse_level("warning") == Level::warn);
  CHECK(wf::log::parse_level("error") == Level::error);
  CHECK(wf::log::parse_level("off") == Level::off);
}

TEST_CASE("an unknown log level is an error naming it and the valid levels", "[core]") {
  for (const char* bad : {"verbose", "", "inf"}) {
    CAPTURE(bad);
    REQUIRE_THROWS_AS(wf::log::parse_level(bad), wf::Error);
    REQUIRE_THROWS_WITH(wf::log::parse_level(bad),
                        Contains(std::string("'") + bad + "'") && Contains("trace") && Contains("off"));
  }
}

TEST_CASE("the log level filters messages", "[core]") {
  wf::log::set_level(Level::warn);
  CHECK_FALSE(wf::log::enabled(Level::info));
  CHECK(wf::log::enabled(Level::warn));
  CHECK(wf::log::enabled(Level::error));
  CHECK_FALSE(wf::log::enabled(Level::off));
  wf::log::set_level(Level::off);
  CHECK_FALSE(wf::log::enabled(Level::error));
  wf::log::set_level(Level::info);  // the default, for the tests that follow
  CHECK(wf::log::enabled(Level::info));
  CHECK_FALSE(wf::log::enabled(Level::debug));
}
