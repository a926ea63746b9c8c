// Config input that is not a config: a second YAML document, NUL bytes, nesting deep enough to
// overflow a recursive parser, a directory, a device, an unreadable file. Each must fail at once
// with a message naming the file and the problem, never crash, hang or load part of the file.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <regex>
#include <string>

#include "config/config_test_util.h"
#include "wallfacer/config/run_config.h"

namespace wf::config {
namespace {

using Catch::Matchers::Contains;
using test::error_of;
using test::TempYaml;

std::string parse_error(const std::string& yaml) {
  return error_of([&] { parse_config(yaml, {}, "run.yaml"); });
}

// "(load_config.cpp:42)" at the end: what WF_CHECK appends for internal errors.
bool ends_with_source_location(const std::string& message) {
  return std::regex_search(message, std::regex(R"(\([A-Za-z0-9_]+\.(cpp|h):[0-9]+\)$)"));
}

TEST_CASE("config: a second YAML document is refused, not silently dropped", "[config]") {
  const std::string message = parse_error("train:\n  steps: 10\n---\ntrain:\n  steps: 20\n");
  CHECK_THAT(message, Contains("run.yaml:3: a second YAML document starts here") && Contains("one document"));
  CHECK_THAT(parse_error("---\ntrain:\n  steps: 1\n---\nlog:\n  dir: x\n"), Contains("run.yaml:4: a second YAML"));
  // One document with explicit markers, and an empty text, are fine.
  CHECK(parse_config("---\ntrain:\n  steps: 7\n...\n").train.steps == 7);
  CHECK(parse_config("").train.steps == RunConfig{}.train.steps);
}

TEST_CASE("config: a stray flow indicator is a syntax error, not a hang", "[config]") {
  // Found by tests/fuzz (config): yaml-cpp 0.7's LoadAll loops forever on these, allocating a
  // null document per turn (jbeder/yaml-cpp#1040).
  CHECK_THAT(parse_error(","), Contains("run.yaml:1:1: YAML syntax error: unexpected ','"));
  CHECK_THAT(parse_error("[a] ,"), Contains("run.yaml:1:5: YAML syntax error: unexpected ','"));
  CHECK_THAT(parse_error("\"a\"\n,\n"), Contains("run.yaml:2:1: YAML syntax error: unexpected ','"));
  CHECK_THAT(parse_error("{model: x ulysses},\n"), Contains("run.yaml:1:19: YAML syntax error"));
}

TEST_CASE("config: text that is not UTF-8 is refused, since to_yaml could not write it back", "[config]") {
  // Found by tests/fuzz (config): yaml-cpp's emitter wrote U+FFFD for the invalid bytes of a
  // path, so to_yaml described another directory than the one the run used.
  CHECK_THAT(parse_error("checkpoint:\n  dir: runs/\xd3\x93\xff\n"),
             Contains("run.yaml:2:15: byte 0xff is not valid UTF-8"));
  for (const std::string bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    CHECK_THAT(parse_error("log:\n  dir: " + bad + "\n"), Contains("is not valid UTF-8"));
  }
  CHECK_THAT(error_of([] { parse_config("", {"log.dir=\xff"}); }), Contains("--set: the override is not valid UTF-8"));
  // Well-formed multi-byte text is fine, and survives the round trip.
  const RunConfig config = parse_config("log:\n  dir: \"runs/\xc3\xa9t\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"\n");
  CHECK(config.log.dir == "runs/\xc3\xa9t\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
  CHECK(parse_config(to_yaml(config)) == config);
}

TEST_CASE("config: a NUL byte is refused with its line and column", "[config]") {
  const std::string message = parse_error(std::string("train:\n  steps: 1\0\n", 19));
  CHECK_THAT(message, Contains("run.yaml:2:11: the text holds a NUL byte") && Contains("not a YAML run config"));
}

TEST_CASE("config: deep nesting is refused before the parser recurses", "[config]") {
  for (const std::string& opener : {std::string("["), std::string("{"), std::string("- ")}) {
    INFO(opener);
    std::string deep;
    for (int i = 0; i < 100000; ++i) deep += opener;
    CHECK_THAT(parse_error(deep), Contains("run.yaml:1:") && Contains("nested more than 32 levels deep"));
  }
  CHECK_THAT(parse_error("train: " + std::string(100000, '[')), Contains("nested more than 32 levels"));
  // Brackets inside comments and balanced ones across a file do not add up.
  std::string commented;
  for (int i = 0; i < 100; ++i) commented += "# see [" + std::to_string(i) + "\n";
  CHECK(parse_config(commented + "train:\n  steps: 5\n").train.steps == 5);
  std::string balanced;
  for (int i = 0; i < 100; ++i) balanced += "# [[]]\n";
  CHECK(parse_config(balanced + "train: {steps: 6}\n").train.steps == 6);
}

TEST_CASE("config: oversized text is refused", "[config]") {
  CHECK_THAT(parse_error(std::string(2 << 20, ' ')), Contains("run.yaml: 2097152 bytes is no run config"));
}

TEST_CASE("config: a file that is not a readable YAML file is named with the problem", "[config]") {
  SECTION("a file far larger than any config (a data set, say): refused after reading 1 MiB") {
    TempYaml file("huge.yaml", std::string(3 << 20, '#'));
    CHECK_THROWS_WITH(load_config(file.path()), Contains("is larger than 1048576 bytes") && Contains("right file?"));
  }
  SECTION("a directory") {
    const std::string dir = std::filesystem::temp_directory_path().string();
    CHECK_THROWS_WITH(load_config(dir), Contains("config file '" + dir + "' is a directory: give the YAML file itself"));
  }
  SECTION("a device, which would never end") {
    CHECK_THROWS_WITH(load_config("/dev/zero"), Contains("config file '/dev/zero' is not a regular file"));
  }
  SECTION("a path through a regular file") {
    TempYaml file("plain.yaml", "train:\n  steps: 3\n");
    const std::string path = file.path() + "/run.yaml";
    CHECK_THROWS_WITH(load_config(path), Contains("cannot read config file '" + path + "': Not a directory"));
  }
  SECTION("a file that opens but cannot be read") {
    // /proc/self/mem opens for root and fails every read at offset 0 (nothing is mapped there).
    if (!std::filesystem::exists("/proc/self/mem")) return;
    CHECK_THROWS_WITH(load_config("/proc/self/mem"), Contains("cannot read config file '/proc/self/mem': "));
  }
  SECTION("a FIFO nobody writes to does not hang the open") {
    TempYaml file("fifo.yaml", "");
    std::filesystem::remove(file.path());
    REQUIRE(::mkfifo(file.path().c_str(), 0600) == 0);
    // No writer: the read sees end of file at once, which is refused (not a config of defaults).
    CHECK_THROWS_WITH(load_config(file.path()), Contains("is a pipe that delivered nothing"));
  }
}

TEST_CASE("config: messages that name the key and the fix carry no source location", "[config]") {
  TempYaml bad_value("bad_value.yaml", "train:\n  steps: ten\n");
  TempYaml two_docs("two_docs.yaml", "train:\n  steps: 1\n---\n");
  const std::vector<std::string> messages = {
      error_of([&] { load_config(bad_value.path()); }),
      error_of([&] { load_config(two_docs.path()); }),
      error_of([&] { load_config("/no/such/run.yaml"); }),
      error_of([&] { parse_config("train:\n  steps: [1\n"); }),
      error_of([&] { parse_config("", {"train.stpes=3"}); }),
      error_of([&] { parse_config("", {"train.steps=-1"}); }),
      error_of([&] { validate(parse_config("parallel:\n  dp: 2\n"), 3); }),
  };
  for (const std::string& message : messages) {
    INFO(message);
    CHECK_FALSE(message.empty());
    CHECK_FALSE(ends_with_source_location(message));
  }
  // Internal errors keep theirs.
  CHECK(ends_with_source_location(error_of([] { WF_FAIL("an internal error"); })));
}

}  // namespace
}  // namespace wf::config
