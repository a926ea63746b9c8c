#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/data/tokenizer.h"

using namespace wf::data;

TEST_CASE("the byte tokenizer maps each byte to its value and back", "[data][tokenizer]") {
  const ByteTokenizer tokenizer;
  CHECK(tokenizer.vocab_size() == 256);
  CHECK(tokenizer.encode("Hi\n") == std::vector<std::uint32_t>{72, 105, 10});

  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string random_bytes(1000, '\0');
  for (char& c : random_bytes) c = static_cast<char>(byte(gen));
  for (const std::string& text : {std::string(), all_bytes, random_bytes, std::string("caf\xC3\xA9  \n\n x")}) {
    const auto tokens = tokenizer.encode(text);
    REQUIRE(tokens.size() == text.size());
    CHECK(tokenizer.decode(tokens) == text);
  }
  const std::vector<std::uint32_t> bad{65, 256};
  CHECK_THROWS_WITH(tokenizer.decode(bad), Catch::Matchers::Contains("token 256 at index 1 is not a byte"));
}

TEST_CASE("make_tokenizer picks a tokenizer by name", "[data][tokenizer]") {
  CHECK(make_tokenizer("byte", "")->name() == "byte");
  CHECK_THROWS_WITH(make_tokenizer("sentencepiece", ""),
                    Catch::Matchers::Contains("unknown tokenizer 'sentencepiece': expected byte or gpt2"));
  CHECK_THROWS_WITH(make_tokenizer("gpt2", "/no/such/dir"),
                    Catch::Matchers::Contains("/no/such/dir/encoder.json") &&
                        Catch::Matchers::Contains("scripts/fetch-gpt2-bpe.sh"));
}
