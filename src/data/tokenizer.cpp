#include "wallfacer/data/tokenizer.h"

#include "wallfacer/core/error.h"
#include "wallfacer/data/gpt2_tokenizer.h"

namespace wf::data {

std::vector<std::uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const std::uint32_t> tokens) const {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    WF_CHECK(tokens[i] < 256, "byte tokenizer: token {} at index {} is not a byte (the vocabulary is 0..255)",
             tokens[i], i);
    text[i] = static_cast<char>(tokens[i]);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& gpt2_dir) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") return std::make_unique<Gpt2Tokenizer>(gpt2_dir);
  WF_FAIL("unknown tokenizer '{}': expected byte or gpt2", name);
}

}  // namespace wf::data
