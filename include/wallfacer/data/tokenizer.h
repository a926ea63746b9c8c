#pragma once
// Tokenizers turn text (UTF-8 bytes) into token ids and back. Both kinds are lossless:
// decode(encode(text)) == text for any byte string.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wf::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;              // "byte", "gpt2"
  virtual std::int64_t vocab_size() const = 0;       // every id is < vocab_size()
  virtual std::vector<std::uint32_t> encode(std::string_view text) const = 0;
  // wf::Error on an id outside the vocabulary.
  virtual std::string decode(std::span<const std::uint32_t> tokens) const = 0;
  // The token `prepare-text` appends after each document (GPT-2's <|endoftext|>), or none.
  virtual std::optional<std::uint32_t> document_end() const { return std::nullopt; }
};

// One token per byte: id = byte value, vocab 256. No end-of-text token: every id is a byte.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  std::int64_t vocab_size() const override { return 256; }
  std::vector<std::uint32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::uint32_t> tokens) const override;
};

// The tokenizer called `name` ("byte" or "gpt2"; the GPT-2 one reads its vocabulary from
// gpt2_dir). wf::Error naming the choices for any other name.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& gpt2_dir);

}  // namespace wf::data
