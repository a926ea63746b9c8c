#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/token_file.h"

using namespace wf::data;
using wf::data::testing::read_bytes;
using wf::data::testing::TempDir;
using wf::data::testing::write_bytes;
using Catch::Matchers::Contains;

namespace {

std::vector<std::uint32_t> random_tokens(std::size_t n, std::uint32_t vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::uint32_t> id(0, vocab - 1);
  std::vector<std::uint32_t> tokens(n);
  for (auto& t : tokens) t = id(gen);
  return tokens;
}

// A token file's header with any field set as a test wants it.
std::string header(const char* magic, std::uint32_t version, std::uint32_t width, std::uint64_t count) {
  std::string h(24, '\0');
  std::memcpy(h.data(), magic, 8);
  std::memcpy(h.data() + 8, &version, 4);
  std::memcpy(h.data() + 12, &width, 4);
  std::memcpy(h.data() + 16, &count, 8);
  return h;
}

// Opening `path` fails with a message that names the file, `problem` and the fix.
void require_bad_file(const std::string& path, const std::string& problem) {
  try {
    TokenFile file(path);
    FAIL("opening " << path << " should have failed with '" << problem << "'");
  } catch (const wf::Error& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Contains(path) && Contains(problem) && Contains("wallfacer prepare-text"));
  }
}

}  // namespace

TEST_CASE("token files round-trip uint16 and uint32 tokens", "[data][token_file]") {
  TempDir dir;
  for (const std::int64_t vocab : {std::int64_t{256}, std::int64_t{50257}, std::int64_t{65536}, std::int64_t{100000}}) {
    INFO("vocab " << vocab);
    const auto tokens = random_tokens(1000, static_cast<std::uint32_t>(vocab), 7);
    const std::string path = dir.file("tokens.bin");
    write_token_file(path, tokens, vocab);
    const TokenFile file(path);
    const int width = vocab <= 65536 ? 2 : 4;
    CHECK(file.token_bytes() == width);
    CHECK(std::filesystem::file_size(path) == static_cast<std::uintmax_t>(24 + 1000 * width));
    REQUIRE(file.size() == 1000);
    for (std::int64_t i = 0; i < file.size(); ++i) REQUIRE(file.at(i) == tokens[static_cast<std::size_t>(i)]);
    std::vector<std::int64_t> window(100);
    file.copy(900, 100, window.data());
    for (std::size_t i = 0; i < window.size(); ++i) REQUIRE(window[i] == tokens[900 + i]);
  }
}

TEST_CASE("token files hold empty arrays and the header layout of docs/data.md", "[data][token_file]") {
  TempDir dir;
  const std::string path = dir.file("empty.bin");
  write_token_file(path, {}, 256);
  CHECK(TokenFile(path).size() == 0);
  write_token_file(path, {1, 2, 65535}, 65536);
  CHECK(read_bytes(path) == header("WFTOKENS", 1, 2, 3) + std::string("\x01\x00\x02\x00\xff\xff", 6));
}

TEST_CASE("token file reads are bounds-checked", "[data][token_file]") {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  write_token_file(path, {5, 6, 7}, 256);
  const TokenFile file(path);
  std::vector<std::int64_t> out(4);
  CHECK_THROWS_WITH(file.at(3), Contains("index 3 is out of range [0, 3)"));
  CHECK_THROWS_WITH(file.at(-1), Contains("out of range"));
  CHECK_THROWS_WITH(file.copy(1, 3, out.data()), Contains("tokens [1, 4) are out of range [0, 3)"));
  CHECK_NOTHROW(file.copy(3, 0, out.data()));
  TokenFile moved = TokenFile(path);
  CHECK(moved.at(2) == 7);
}

TEST_CASE("a token file truncated or replaced while mapped", "[data][token_file]") {
  TempDir dir;
  const std::string path = dir.file("t.bin");
  const std::vector<std::uint32_t> tokens = random_tokens(5000, 70000, 11);  // uint32: 20024 bytes
  write_token_file(path, tokens, 70000);
  std::vector<std::int64_t> out(10);

  SECTION("replaced by rename (write_token_file): the mapping keeps the old tokens") {
    TokenFile file(path);
    write_token_file(path, {1, 2}, 70000);
    file.copy(4990, 10, out.data());
    CHECK(out == std::vector<std::int64_t>(tokens.end() - 10, tokens.end()));
    CHECK(TokenFile(path).size() == 2);
  }
  SECTION("truncated in place: at() and copy() name the file instead of faulting (SIGBUS)") {
    const TokenFile moved_from_here = [&] {
      TokenFile first(path);
      return first;  // the kept descriptor moves with the mapping
    }();
    std::filesystem::resize_file(path, 24);
    const std::string message = "token file '" + path + "' shrank to 24 bytes while this run reads it (it had 20024";
    CHECK_THROWS_WITH(moved_from_here.copy(4990, 10, out.data()), Contains(message) && Contains("prepare-text"));
    CHECK_THROWS_WITH(moved_from_here.copy(0, 1, out.data()), Contains(message));
    CHECK_THROWS_WITH(moved_from_here.at(0), Contains(message));
    std::filesystem::resize_file(path, 20024);  // grown back (zeros): readable again
    CHECK(moved_from_here.at(0) == 0);
  }
}

TEST_CASE("write_token_file replaces a file atomically", "[data][token_file]") {
  TempDir dir;
  const std::string path = dir.file("train.bin");
  const auto old_tokens = random_tokens(100, 256, 1);
  write_token_file(path, old_tokens, 256);
  CHECK(dir.entries() == std::vector<std::string>{"train.bin"});  // no temporary file left behind
  const std::string old_bytes = read_bytes(path);

  SECTION("a write that fails part-way leaves the old file as it was") {
    // The bad id comes after the first chunk has been written to the temporary file.
    auto tokens = random_tokens(200000, 256, 2);
    tokens[150000] = 256;
    CHECK_THROWS_WITH(write_token_file(path, tokens, 256),
                      Contains("token 256 at index 150000 is outside the vocabulary (size 256)") && Contains(path));
    CHECK(read_bytes(path) == old_bytes);
    CHECK(dir.entries() == std::vector<std::string>{"train.bin"});
  }
  SECTION("a successful write replaces it whole") {
    const auto new_tokens = random_tokens(300, 50257, 3);
    write_token_file(path, new_tokens, 50257);
    const TokenFile file(path);
    REQUIRE(file.size() == 300);
    CHECK(file.at(299) == new_tokens[299]);
    CHECK(dir.entries() == std::vector<std::string>{"train.bin"});
  }
  SECTION("a directory that does not exist is an error naming it") {
    CHECK_THROWS_WITH(write_token_file(dir.file("no/such/dir/x.bin"), old_tokens, 256),
                      Contains("cannot create a temporary file") && Contains("no/such/dir"));
  }
  SECTION("a vocabulary too large for uint32 ids is refused") {
    CHECK_THROWS_WITH(write_token_file(path, old_tokens, std::int64_t{1} << 33), Contains("2^32"));
    CHECK(read_bytes(path) == old_bytes);
  }
}

TEST_CASE("bad token files are errors that name the file, the problem and the fix", "[data][token_file]") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  const std::string two_tokens("\x01\x00\x02\x00", 4);

  SECTION("missing") { require_bad_file(dir.file("missing.bin"), "cannot open it"); }
  SECTION("shorter than the header") {
    write_bytes(path, "WFTOK");
    require_bad_file(path, "truncated: 5 bytes, shorter than its 24-byte header");
  }
  SECTION("wrong magic") {
    write_bytes(path, header("NOTOKENS", 1, 2, 2) + two_tokens);
    require_bad_file(path, "wrong magic");
  }
  SECTION("unknown version") {
    write_bytes(path, header("WFTOKENS", 2, 2, 2) + two_tokens);
    require_bad_file(path, "unknown format version 2");
  }
  SECTION("unsupported dtype") {
    write_bytes(path, header("WFTOKENS", 1, 3, 2) + two_tokens);
    require_bad_file(path, "unsupported token dtype 3");
  }
  SECTION("truncated: the header counts more tokens than the file holds") {
    write_bytes(path, header("WFTOKENS", 1, 2, 3) + two_tokens);
    require_bad_file(path, "truncated: its header says 3 tokens of uint16 but only 4 bytes follow");
  }
  SECTION("a count so large that count * width overflows is truncation too") {
    write_bytes(path, header("WFTOKENS", 1, 4, std::uint64_t{1} << 62) + two_tokens);
    require_bad_file(path, "truncated");
  }
  SECTION("a directory (data.train_path pointing at prepare-text's output dir)") {
    std::filesystem::create_directories(path);
    require_bad_file(path, "is a directory, not a token file");
  }
  SECTION("a FIFO is refused at once, without waiting for a writer") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    require_bad_file(path, "not a regular file");
  }
  SECTION("trailing bytes after the counted tokens") {
    write_bytes(path, header("WFTOKENS", 1, 2, 1) + two_tokens);
    require_bad_file(path, "damaged: 2 bytes follow its 1 tokens");
  }
}
