#pragma once
// Reading documents for `wallfacer prepare-text` (docs/data.md "Documents"): plain text files
// (one document per file, or split on a separator) and JSON Lines (one record a line, the text
// under a key), raw or gzipped, named one by one or as folders. A record that cannot be a
// document (invalid JSON, a missing or non-string key, invalid UTF-8) is a bad record: counted,
// reported with its file and line, and skipped up to a limit, never dropped silently.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wf::data {

enum class DocumentFormat { text, jsonl };

// What a folder contributes for each format (a file named on its own is read whatever its name).
// text: .txt, .txt.gz; jsonl: .jsonl, .jsonl.gz.
std::vector<std::string> document_extensions(DocumentFormat format);

// The files to read for `inputs`: a file as it is; a folder's files with the format's extensions,
// recursively, in byte order of their paths (hidden names, starting with '.', left out). wf::Error
// naming the input for a missing path, one that is neither a file nor a folder, an empty named
// file, or a folder with no file to read.
std::vector<std::string> list_document_files(const std::vector<std::string>& inputs, DocumentFormat format);

// --separator's text with the escapes \n, \r, \t and \\ replaced; wf::Error naming any other
// escape, or an empty separator.
std::string unescape_separator(std::string_view text);

enum class BadRecordKind { invalid_utf8, invalid_json, not_an_object, missing_key, not_a_string };
inline constexpr int kBadRecordKinds = 5;
std::string_view bad_record_kind_name(BadRecordKind kind);  // "invalid UTF-8", "invalid JSON", ...

// One JSON Lines record: the string under `text_key` of the object on `line`, or why there is none.
struct JsonlRecord {
  std::optional<std::string> text;
  BadRecordKind problem = BadRecordKind::invalid_json;  // when !text
  std::string reason;                                   // when !text: what is wrong, for the report
};
// Never throws on any bytes: invalid UTF-8 (the offset of the first bad byte), JSON that does not
// parse (the parser's message), a value that is not an object, an object without the key or with
// it twice, or a key whose value is not a string are answered as problems.
JsonlRecord parse_jsonl_record(std::string_view line, std::string_view text_key);

struct DocumentReadOptions {
  DocumentFormat format = DocumentFormat::text;
  std::optional<std::string> separator;  // text: split each file on it (already unescaped); none: one per file
  std::string text_key = "text";         // jsonl
  std::int64_t max_bad_records = 0;      // more than this many is a wf::Error listing the first ones
};

// Where a document or a bad record was found.
struct RecordPlace {
  std::string file;
  std::int64_t line = 0;  // 1-based: a JSON Lines record's line, a text document's first line
};

struct BadRecordReport {
  static constexpr std::size_t kExamples = 5;  // reported in full; the rest are counted
  std::int64_t total = 0;
  std::array<std::int64_t, kBadRecordKinds> by_kind{};
  std::vector<std::string> examples;  // "file:line: kind: reason" of the first kExamples
  // One line: "3 bad records skipped (2 invalid JSON, 1 missing key)".
  std::string summary() const;
};

struct DocumentReadTotals {
  std::int64_t files = 0;
  std::int64_t documents = 0;     // handed to the callback
  std::int64_t empty_skipped = 0;  // documents with no text, or only ASCII whitespace: not documents
  BadRecordReport bad;
};

// Reads `files` in order and calls `on_document(text, place)` for every document; `on_bytes(n)`
// after each, with the bytes of input consumed so far (the files' sizes on disk, for progress).
// wf::Error naming the file for one that cannot be read or a corrupt gzip stream, and, once more
// than options.max_bad_records records are bad, one listing the first ones and the fix.
using DocumentCallback = std::function<void(std::string_view text, const RecordPlace& place)>;
DocumentReadTotals read_documents(const std::vector<std::string>& files, const DocumentReadOptions& options,
                                  const DocumentCallback& on_document,
                                  const std::function<void(std::int64_t bytes_read)>& on_bytes = {});

}  // namespace wf::data
