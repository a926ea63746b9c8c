// prepare_text (data/prepare_text.h): documents -> token files and their document indexes.
#include "wallfacer/data/prepare_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "wallfacer/core/error.h"
#include "wallfacer/data/document_index.h"
#include "wallfacer/data/token_file.h"

namespace wf::data {
namespace {

using Clock = std::chrono::steady_clock;

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

std::string duration_text(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// One line every `every` seconds: counts, bytes read of the inputs' total and the time left at
// the rate so far.
class ProgressMeter {
 public:
  ProgressMeter(std::FILE* out, double every, std::int64_t total_bytes)
      : out_(out), every_(every), total_bytes_(total_bytes), start_(Clock::now()), last_(start_) {}

  void update(std::int64_t documents, std::int64_t tokens, std::int64_t bytes_read) {
    if (out_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < every_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction = total_bytes_ > 0 ? static_cast<double>(bytes_read) / static_cast<double>(total_bytes_) : 0;
    const std::string left = fraction > 0 ? duration_text(elapsed * (1 - fraction) / fraction) + " left" : "";
    std::fprintf(out_, "prepare-text: %lld documents, %lld tokens, %s/%s MiB read (%.0f%%), %s\n",
                 static_cast<long long>(documents), static_cast<long long>(tokens), mib(bytes_read).c_str(),
                 mib(total_bytes_).c_str(), 100 * fraction, left.c_str());
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  double every_;
  std::int64_t total_bytes_;
  Clock::time_point start_, last_;
};

std::int64_t bytes_on_disk(const std::vector<std::string>& files) {
  std::int64_t total = 0;
  for (const std::string& file : files) {
    std::error_code ec;
    total += static_cast<std::int64_t>(std::filesystem::file_size(file, ec));
  }
  return total;
}

// Writes `part`, the tokens from `begin` of the stream on, and the documents starting in it
// (shifted to the file's start).
PreparedSplit write_split(const std::string& dir, const std::string& name, const std::vector<std::uint32_t>& part,
                          std::int64_t begin, const std::vector<std::int64_t>& starts, const Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  PreparedSplit split;
  split.tokens_path = (fs::path(dir) / (name + ".bin")).string();
  split.index_path = document_index_path(split.tokens_path);
  split.tokens = static_cast<std::int64_t>(part.size());
  const std::int64_t end = begin + split.tokens;
  DocumentIndex index{.token_count = split.tokens, .starts = {}, .end_of_text = tokenizer.document_end()};
  if (split.tokens > 0) index.starts.push_back(0);  // the first document, or the cut one's tail
  for (const std::int64_t start : starts) {
    if (start > begin && start < end) index.starts.push_back(start - begin);
  }
  split.documents = index.documents();
  write_token_file(split.tokens_path, part, tokenizer.vocab_size());
  write_document_index(split.index_path, index);
  return split;
}

}  // namespace

std::int64_t validation_start(const std::vector<std::int64_t>& starts, std::int64_t total, double val_fraction) {
  const auto wanted = static_cast<std::int64_t>(std::floor(static_cast<double>(total) * val_fraction));
  if (wanted == 0 || starts.empty()) return total;
  if (starts.size() == 1) return total - wanted;
  std::int64_t best = starts[1];
  for (std::size_t k = 1; k < starts.size(); ++k) {
    // From the first document on: a later start with an equal distance is the smaller set.
    if (std::llabs(total - starts[k] - wanted) <= std::llabs(total - best - wanted)) best = starts[k];
  }
  return best;
}

PrepareTextResult prepare_text(const PrepareTextOptions& o, const Tokenizer& tokenizer) {
  PrepareTextResult result;
  result.files = list_document_files(o.inputs, o.read.format);
  result.end_of_text = tokenizer.document_end();

  std::vector<std::uint32_t> tokens;
  std::vector<std::int64_t> starts;
  ProgressMeter progress(o.progress, o.progress_seconds, bytes_on_disk(result.files));
  std::int64_t bytes_read = 0;
  result.read = read_documents(
      result.files, o.read,
      [&](std::string_view text, const RecordPlace&) {
        starts.push_back(static_cast<std::int64_t>(tokens.size()));
        const std::vector<std::uint32_t> document = tokenizer.encode(text);
        tokens.insert(tokens.end(), document.begin(), document.end());
        if (result.end_of_text) tokens.push_back(*result.end_of_text);
      },
      [&](std::int64_t bytes) {
        bytes_read = bytes;
        progress.update(static_cast<std::int64_t>(starts.size()), static_cast<std::int64_t>(tokens.size()), bytes_read);
      });
  WF_USER_CHECK(!starts.empty(),
                "prepare-text: the {} input file(s) hold no document ({} empty, {}); check --format{}",
                result.files.size(), result.read.empty_skipped, result.read.bad.summary(),
                o.read.format == DocumentFormat::jsonl ? " and --text-key" : "");

  const auto total = static_cast<std::int64_t>(tokens.size());
  const std::int64_t split = validation_start(starts, total, o.val_fraction);
  WF_USER_CHECK(split > 0, "prepare-text: {} tokens leave none for training at --val-fraction {}", total,
                o.val_fraction);
  result.cut_single_document = split < total && std::find(starts.begin(), starts.end(), split) == starts.end();

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  WF_USER_CHECK(!ec, "prepare-text: cannot create output directory '{}': {}", o.output_dir, ec.message());
  const std::vector<std::uint32_t> val(tokens.begin() + split, tokens.end());
  tokens.resize(static_cast<std::size_t>(split));  // the training part, without a copy
  result.train = write_split(o.output_dir, "train", tokens, 0, starts, tokenizer);
  result.val = write_split(o.output_dir, "val", val, split, starts, tokenizer);
  return result;
}

}  // namespace wf::data
