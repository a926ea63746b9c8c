// Token sources for the batch loader: memory-mapped token files and seeded synthetic tokens.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/data/token_file.h"

namespace wf::data {
namespace {

void check_range(const TokenSource& source, std::int64_t start, std::int64_t count) {
  WF_CHECK(start >= 0 && count >= 0 && start <= source.size() && count <= source.size() - start,
           "{}: tokens [{}, {}) are out of range [0, {})", source.describe(), start, start + count, source.size());
}

class TokenFileSource final : public TokenSource {
 public:
  explicit TokenFileSource(const std::string& path) : file_(path) {}
  std::int64_t size() const override { return file_.size(); }
  void read(std::int64_t start, std::int64_t count, std::int64_t* out) const override {
    file_.copy(start, count, out);  // bounds-checked, naming the file
  }
  std::string describe() const override { return fmt::format("token file '{}'", file_.path()); }
  std::shared_ptr<const DocumentIndex> documents() const override;

 private:
  TokenFile file_;
};

// Samples of the documents checked against the token file: reading all of them would touch
// every page of a large file at start-up.
constexpr std::int64_t kEndOfTextChecks = 64;

std::shared_ptr<const DocumentIndex> TokenFileSource::documents() const {
  const std::string path = document_index_path(file_.path());
  std::error_code ec;
  WF_USER_CHECK(std::filesystem::exists(path, ec),
                "token file '{}' has no document index '{}' beside it, which packing documents (data.pack: true) "
                "needs; re-run `wallfacer prepare-text` (it writes both), or set data.pack: false",
                file_.path(), path);
  auto index = std::make_shared<DocumentIndex>(read_document_index(path));
  WF_USER_CHECK(index->token_count == file_.size(),
                "document index '{}' is for {} tokens but token file '{}' holds {}: they were not written together; "
                "re-run `wallfacer prepare-text`, which writes both",
                path, index->token_count, file_.path(), file_.size());
  if (index->end_of_text && index->documents() > 0) {
    const std::int64_t D = index->documents();
    const std::int64_t step = std::max<std::int64_t>(1, D / kEndOfTextChecks);
    for (std::int64_t d = 0; d < D; d += step) {
      // The last token of document d.
      const std::int64_t last = d + 1 < D ? index->starts[static_cast<std::size_t>(d + 1)] - 1 : file_.size() - 1;
      WF_USER_CHECK(file_.at(last) == *index->end_of_text,
                    "document index '{}' does not match token file '{}': document {} should end with the end-of-text "
                    "token {} at token {}, which is {}; re-run `wallfacer prepare-text`, which writes both",
                    path, file_.path(), d, *index->end_of_text, last, file_.at(last));
    }
  }
  return index;
}

class SyntheticSource final : public TokenSource {
 public:
  SyntheticSource(std::int64_t vocab_size, std::int64_t num_tokens, std::uint64_t seed)
      : vocab_(static_cast<std::uint64_t>(vocab_size)), size_(num_tokens), seed_(seed) {}
  std::int64_t size() const override { return size_; }
  // Token i takes 64 bits of Philox block i / 2 (words 0–1 for even i, 2–3 for odd i), so a
  // token never depends on which other tokens a read covers.
  void read(std::int64_t start, std::int64_t count, std::int64_t* out) const override {
    check_range(*this, start, count);
    std::int64_t block = -1;
    std::array<std::uint32_t, 4> words{};
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t i = start + k;
      if (i / 2 != block) {
        block = i / 2;
        words = philox4x32(seed_, static_cast<std::uint64_t>(block));
      }
      const int w = static_cast<int>(i % 2) * 2;
      const std::uint64_t bits = (static_cast<std::uint64_t>(words[w]) << 32) | words[w + 1];
      // Multiply-high maps 64 uniform bits onto [0, vocab) with bias below vocab / 2^64.
      out[k] = static_cast<std::int64_t>((static_cast<unsigned __int128>(bits) * vocab_) >> 64);
    }
  }
  std::string describe() const override {
    return fmt::format("synthetic tokens (vocab {}, {} tokens, seed {})", vocab_, size_, seed_);
  }

 private:
  std::uint64_t vocab_;
  std::int64_t size_;
  std::uint64_t seed_;
};

}  // namespace

TokenSource::~TokenSource() = default;

std::shared_ptr<const DocumentIndex> TokenSource::documents() const {
  WF_USER_FAIL("{} has no documents to pack: data.pack needs token files written by `wallfacer prepare-text`, with "
               "their document indexes; set data.pack: false for this source",
               describe());
}

std::shared_ptr<TokenSource> open_token_file_source(const std::string& path) {
  return std::make_shared<TokenFileSource>(path);
}

std::shared_ptr<TokenSource> make_synthetic_source(std::int64_t vocab_size, std::int64_t num_tokens,
                                                   std::uint64_t seed) {
  WF_CHECK(vocab_size >= 1, "make_synthetic_source: vocab_size is {}; it must be at least 1", vocab_size);
  WF_CHECK(num_tokens >= 0, "make_synthetic_source: num_tokens is {}; it must be at least 0", num_tokens);
  return std::make_shared<SyntheticSource>(vocab_size, num_tokens, seed);
}

}  // namespace wf::data
