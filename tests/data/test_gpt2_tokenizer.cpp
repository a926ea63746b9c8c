// The expected ids come from the reference encoder of the same vocabulary: Encoder.js of the npm
// package gpt-3-encoder@1.1.4 (run under node), which uses real Unicode property classes.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/data_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/data/gpt2_tokenizer.h"

using namespace wf::data;
using Catch::Matchers::Contains;
using Ids = std::vector<std::uint32_t>;

namespace {

// Loaded once for the whole run (parsing encoder.json is the slow part). The cases that need it
// are hidden ("[.vocab]"): CTest's data_gpt2_vocab runs them where the vocabulary is and reports
// SKIPPED elsewhere (tests/CMakeLists.txt), so a case that gets here without it fails.
const Gpt2Tokenizer& gpt2() {
  static const std::unique_ptr<Gpt2Tokenizer> tokenizer = []() -> std::unique_ptr<Gpt2Tokenizer> {
    const std::string dir = testing::gpt2_dir();
    if (dir.empty()) return nullptr;
    return std::make_unique<Gpt2Tokenizer>(dir);
  }();
  if (tokenizer == nullptr) FAIL("GPT-2 vocabulary not found: set WF_GPT2_DIR or run scripts/fetch-gpt2-bpe.sh");
  return *tokenizer;
}

std::vector<std::string> pieces(std::string_view text) {
  const auto views = gpt2_pretokenize(text);
  return {views.begin(), views.end()};
}

}  // namespace

TEST_CASE("the GPT-2 pre-tokeniser splits as GPT-2's regex does", "[data][gpt2]") {
  using P = std::vector<std::string>;
  CHECK(pieces("Hello world,") == P{"Hello", " world", ","});
  CHECK(pieces("don't I'll we've 'sup ''s") == P{"don", "'t", " I", "'ll", " we", "'ve", " '", "sup", " ''", "s"});
  CHECK(pieces("a  b   c\n\nd\t e  ") == P{"a", " ", " b", "  ", " c", "\n", "\n", "d", "\t", " e", "  "});
  CHECK(pieces("x1234 56.7") == P{"x", "1234", " 56", ".", "7"});
  CHECK(pieces("café Über") == P{"café", " Über"});
  CHECK(pieces("Привет мир") == P{"Привет", " мир"});
  CHECK(pieces("") == P{});
  // Invalid UTF-8 stays covered, one byte a piece, so the round trip is still exact.
  CHECK(pieces("a\xff\xfe b") == P{"a", "\xff\xfe", " b"});
}

TEST_CASE("GPT-2 BPE matches the reference encoder on known strings", "[data][gpt2][.vocab]") {
  const Gpt2Tokenizer& t = gpt2();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.end_of_text() == 50256);
  CHECK(t.encode("Hello world,") == Ids{15496, 995, 11});
  CHECK(t.encode(" the") == Ids{262});
  CHECK(t.encode("Hello, world!") == Ids{15496, 11, 995, 0});
  CHECK(t.encode("The quick brown fox") == Ids{464, 2068, 7586, 21831});
  CHECK(t.encode("don't stop") == Ids{9099, 470, 2245});
  CHECK(t.encode("I'm here, they'll see, we've won, you're 'sup") ==
        Ids{40, 1101, 994, 11, 484, 1183, 766, 11, 356, 1053, 1839, 11, 345, 821, 705, 37330});
  CHECK(t.encode("a  b   c\n\nd\t e  ") == Ids{64, 220, 275, 220, 220, 269, 198, 198, 67, 197, 304, 220, 220});
  CHECK(t.encode("Price: $1,234.56 (approx.)") ==
        Ids{18124, 25, 720, 16, 11, 24409, 13, 3980, 357, 1324, 13907, 2014});
  CHECK(t.encode("café naïve Über façade") == Ids{66, 1878, 2634, 41492, 49363, 527, 24685, 16175, 671});
  CHECK(t.encode("   leading") == Ids{220, 220, 3756});
  CHECK(t.encode("line1\nline2\r\n") == Ids{1370, 16, 198, 1370, 17, 201, 198});
  CHECK(t.encode("Привет мир") == Ids{140, 253, 21169, 18849, 38857, 16843, 20375, 12466, 120, 18849, 21169});
  CHECK(t.encode("日本語のテキスト") == Ids{33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302});
  CHECK(t.encode("x²+y³=½") == Ids{87, 31185, 10, 88, 126, 111, 28, 23141});
  CHECK(t.encode("emoji 🎉 ok") == Ids{368, 31370, 12520, 236, 231, 12876});
  CHECK(t.encode("<|endoftext|>") == Ids{27, 91, 437, 1659, 5239, 91, 29});  // text, not the special token
  CHECK(t.encode("1234567890") == Ids{10163, 2231, 30924, 3829});
  CHECK(t.encode("").empty());
}

TEST_CASE("GPT-2 decode(encode(text)) == text", "[data][gpt2][.vocab]") {
  const Gpt2Tokenizer& t = gpt2();
  const std::vector<std::string> texts = {
      "Hello world,",
      "  two leading spaces,\n\n\nthree newlines and\ttabs\t\t, trailing   ",
      "Mixed: café, naïve, Привет, 日本語, 🎉, x² ½ — “quotes” and 'apostrophes' (don't).\r\n",
      std::string("bytes that are not UTF-8: \xff\xfe\xc3 end", 32),
  };
  for (const std::string& text : texts) {
    INFO(text);
    CHECK(t.decode(t.encode(text)) == text);
  }
  // Random ASCII with many spaces and newlines, and random bytes.
  std::mt19937 gen(5);
  const std::string alphabet = "abcXYZ019 ,.'!\n\t  ";
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string ascii(2000, ' '), bytes(2000, '\0');
  for (char& c : ascii) c = alphabet[pick(gen)];
  for (char& c : bytes) c = static_cast<char>(byte(gen));
  CHECK(t.decode(t.encode(ascii)) == ascii);
  CHECK(t.decode(t.encode(bytes)) == bytes);

  CHECK(t.decode(Ids{50256}) == "<|endoftext|>");
  CHECK_THROWS_WITH(t.decode(Ids{15496, 50257}), Contains("token 50257 at index 1 is outside the vocabulary"));
}

TEST_CASE("a missing or malformed GPT-2 vocabulary is an error that names the file and the fix", "[data][gpt2]") {
  testing::TempDir dir;
  CHECK_THROWS_WITH(Gpt2Tokenizer(dir.file("")), Contains("encoder.json' does not exist") &&
                                                     Contains("scripts/fetch-gpt2-bpe.sh"));
  testing::write_bytes(dir.file("encoder.json"), "{\"a\": 0, ");
  CHECK_THROWS_WITH(Gpt2Tokenizer(dir.file("")), Contains("is not valid JSON"));
  testing::write_bytes(dir.file("encoder.json"), "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
  CHECK_THROWS_WITH(Gpt2Tokenizer(dir.file("")), Contains("vocab.bpe' does not exist"));
  testing::write_bytes(dir.file("vocab.bpe"), "#version: 0.2\nab\n");
  CHECK_THROWS_WITH(Gpt2Tokenizer(dir.file("")), Contains("line 2 of") && Contains("is not a merge 'left right'"));
  // A toy vocabulary works end to end.
  testing::write_bytes(dir.file("vocab.bpe"), "#version: 0.2\na b\n");
  const Gpt2Tokenizer toy(dir.file(""));
  CHECK(toy.encode("abab") == Ids{2, 2});
  CHECK(toy.decode(Ids{2, 0}) == "aba");
  CHECK_THROWS_WITH(toy.encode("c"), Contains("BPE produced 'c', which encoder.json does not hold"));
  // Found by tests/fuzz (gpt2_tokenizer): two tokens of one id made decode(encode("a")) "b".
  testing::write_bytes(dir.file("encoder.json"), "{\"a\": 0, \"b\": 0, \"ab\": 2, \"<|endoftext|>\": 3}");
  CHECK_THROWS_WITH(Gpt2Tokenizer(dir.file("")), Contains("maps both 'a' and 'b' to id 0"));
}
