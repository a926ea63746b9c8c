// Fuzzes the JSON Lines document reader of `prepare-text` (data::read_documents with --format
// jsonl): the input is one whole file, raw or gzipped (zlib tells them apart by the first
// bytes), read line by line into records, each parsed for the string under "text". Every bad
// record is counted (the limit is set past any count), and what comes out is checked against what
// the reader documents: every document is non-blank valid UTF-8, a raw file's non-blank lines are
// each a document, an empty one or a bad record, and the report keeps at most its few examples.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "src/data/utf8.h"
#include "tests/fuzz/fuzz_input.h"
#include "wallfacer/data/documents.h"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "jsonl fuzz: %s\n", what);
  std::abort();
}

bool blank(std::string_view text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

// Non-blank lines of a raw (not gzipped) input: the records the reader must account for.
std::int64_t records_in(std::string_view text) {
  std::int64_t records = 0;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    if (!blank(text.substr(start, end - start))) ++records;
    start = end + 1;
  }
  return records;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (wf::fuzz::scratch_dir() / "input.jsonl").string();
  wf::fuzz::write_file(path, wf::fuzz::input(data, size));
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  wf::fuzz::refusing_only_with_wf_error([&] {
    wf::data::DocumentReadOptions options;
    options.format = wf::data::DocumentFormat::jsonl;
    options.max_bad_records = std::numeric_limits<std::int64_t>::max();
    std::int64_t documents = 0;
    const wf::data::DocumentReadTotals totals =
        wf::data::read_documents({path}, options, [&](std::string_view text, const wf::data::RecordPlace& place) {
          ++documents;
          if (blank(text)) broken("a blank document was handed on");
          if (wf::data::first_invalid_utf8(text) != std::string_view::npos) broken("a document is not valid UTF-8");
          if (place.line < 1) broken("a document has no line");
        });
    if (totals.documents != documents) broken("the documents counted differ from those handed on");
    if (totals.bad.examples.size() > wf::data::BadRecordReport::kExamples) broken("too many examples kept");
    const bool gzipped = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gzipped && totals.documents + totals.empty_skipped + totals.bad.total != records_in(bytes)) {
      broken("a non-blank line is neither a document, an empty one nor a bad record");
    }
  });
  return 0;
}
