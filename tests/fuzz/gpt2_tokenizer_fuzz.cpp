// Fuzzes the GPT-2 tokenizer's vocabulary loader (encoder.json and vocab.bpe) and, when it
// accepts them, BPE over a fixed text. The input is both files, split at the first NUL byte
// (encoder.json before it, vocab.bpe after; without one, vocab.bpe is empty): NUL never occurs
// in either real file, and one input lets the fuzzer make the two agree or disagree.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/data/gpt2_tokenizer.h"

namespace {

// Letters, digits, contractions, runs of spaces, punctuation, non-ASCII and invalid UTF-8: every
// branch of the pre-tokeniser.
constexpr std::string_view kText = "Hello world, it's 2024!\n  \tdon't  stop\xc3\xa9\xe4\xb8\xad \xff\x80?? 42x";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = wf::fuzz::scratch_dir();
  const std::string_view both(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = both.find('\0');
  wf::fuzz::write_file(dir / "encoder.json", both.substr(0, nul));
  wf::fuzz::write_file(dir / "vocab.bpe", nul == std::string_view::npos ? std::string_view() : both.substr(nul + 1));

  wf::fuzz::refusing_only_with_wf_error([&] {
    const wf::data::Gpt2Tokenizer tokenizer(dir.string());
    if (tokenizer.end_of_text() >= tokenizer.vocab_size()) std::abort();
    // encode refuses (wf::Error) when the merges produce a symbol encoder.json lacks; what it
    // does encode must decode to the text again (tokenizer.h: both tokenizers are lossless).
    const auto ids = tokenizer.encode(kText);
    if (tokenizer.decode(ids) != kText) {
      std::fprintf(stderr, "gpt2 tokenizer: decode(encode(text)) != text for an accepted vocabulary\n");
      std::abort();
    }
  });
  return 0;
}
