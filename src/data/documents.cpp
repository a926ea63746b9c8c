// Reading documents (data/documents.h): files and folders, text split on a separator, JSON Lines
// records parsed with nlohmann's SAX interface (no DOM: only the one key is kept), bad records
// counted and reported by file and line.
#include "wallfacer/data/documents.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "src/data/gzip_input.h"
#include "src/data/utf8.h"
#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

constexpr std::int64_t kReadChunkBytes = 1 << 16;
constexpr std::size_t kKeysNamed = 5;  // keys listed when the text key is missing

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

std::string format_name(DocumentFormat format) { return format == DocumentFormat::jsonl ? "jsonl" : "text"; }

// Finds the string under one key of a top-level object, and what else the line holds for the
// message when it is not there. Everything below the top level is parsed (so the whole line must
// be valid JSON) but not kept.
class TextKeyHandler final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TextKeyHandler(std::string_view key) : key_(key) {}

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("a boolean"); }
  bool number_integer(number_integer_t) override { return value("a number"); }
  bool number_unsigned(number_unsigned_t) override { return value("a number"); }
  bool number_float(number_float_t, const string_t&) override { return value("a number"); }
  bool binary(binary_t&) override { return value("binary data"); }
  bool string(string_t& text) override {
    if (depth_ == 1 && at_key_) text_ = std::move(text);
    return value("a string");
  }
  bool start_object(std::size_t) override {
    value("an object");
    ++depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    value("an array");
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& name) override {
    if (depth_ != 1) return true;
    at_key_ = name == key_;
    if (at_key_) ++times_seen_;
    if (keys_.size() < kKeysNamed) keys_.push_back(name);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    error_ = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..." -> from "parse error".
    const std::size_t bracket = error_.find("] ");
    if (error_.starts_with("[json.exception") && bracket != std::string::npos) error_.erase(0, bracket + 2);
    return false;
  }

  JsonlRecord result(std::string_view key) && {
    JsonlRecord record;
    if (!error_.empty()) {
      record.reason = std::move(error_);
    } else if (top_type_ != "an object") {
      record.problem = BadRecordKind::not_an_object;
      record.reason = fmt::format("the line holds {}, not a JSON object", top_type_);
    } else if (times_seen_ == 0) {
      record.problem = BadRecordKind::missing_key;
      record.reason = keys_.empty() ? fmt::format("no key \"{}\" (the object is empty)", key)
                                    : fmt::format("no key \"{}\" (its keys: {}{})", key, fmt::join(keys_, ", "),
                                                  keys_.size() == kKeysNamed ? ", ..." : "");
    } else if (times_seen_ > 1) {
      record.reason = fmt::format("the key \"{}\" appears {} times (which one is the text?)", key, times_seen_);
    } else if (!text_) {
      record.problem = BadRecordKind::not_a_string;
      record.reason = fmt::format("\"{}\" holds {}, not a string", key, key_type_);
    } else {
      record.text = std::move(text_);
    }
    return record;
  }

 private:
  bool value(const char* type) {
    if (depth_ == 0) top_type_ = type;
    if (depth_ == 1 && at_key_) key_type_ = type;
    if (depth_ == 1) at_key_ = false;
    return true;
  }

  std::string_view key_;
  std::int64_t depth_ = 0;
  bool at_key_ = false;  // the next value at depth 1 is the text key's
  int times_seen_ = 0;
  std::string top_type_ = "nothing", key_type_;
  std::optional<std::string> text_;
  std::vector<std::string> keys_;
  std::string error_;
};

// Counts bad records and stops past the limit with the first ones in the message.
class BadRecords {
 public:
  BadRecords(BadRecordReport& report, std::int64_t limit) : report_(report), limit_(limit) {}

  void add(BadRecordKind kind, const RecordPlace& place, std::string_view reason) {
    ++report_.total;
    ++report_.by_kind[static_cast<std::size_t>(kind)];
    const std::string line =
        fmt::format("{}:{}: {}: {}", place.file, place.line, bad_record_kind_name(kind), reason);
    if (report_.examples.size() < BadRecordReport::kExamples) report_.examples.push_back(line);
    if (report_.total <= limit_) return;
    const bool listed = report_.total <= static_cast<std::int64_t>(BadRecordReport::kExamples);
    WF_USER_FAIL(
        "prepare-text: more than --max-bad-records {} bad records ({}): {}{}; fix the input, or let up to N bad "
        "records be skipped (and counted) with --max-bad-records N",
        limit_, report_.summary(), fmt::join(report_.examples, "; "), listed ? "" : fmt::format("; ...; {}", line));
  }

 private:
  BadRecordReport& report_;
  std::int64_t limit_;
};

// The whole (decompressed) contents of a file.
std::string read_all(detail::GzipInput& in) {
  std::string text;
  for (;;) {
    const std::size_t have = text.size();
    text.resize(have + static_cast<std::size_t>(kReadChunkBytes));
    const std::int64_t got = in.read(text.data() + have, kReadChunkBytes);
    text.resize(have + static_cast<std::size_t>(got));
    if (got < kReadChunkBytes) return text;
  }
}

// Lines of a file read in chunks, without their '\n' (and a '\r' before it).
class LineReader {
 public:
  explicit LineReader(detail::GzipInput& in) : in_(in) {}

  bool next(std::string& line) {
    line.clear();
    bool consumed = false;  // any byte of this line, its '\n' included
    for (;;) {
      if (at_ < buffer_.size()) {
        consumed = true;
        const std::size_t newline = buffer_.find('\n', at_);
        const std::size_t end = newline == std::string::npos ? buffer_.size() : newline;
        line.append(buffer_, at_, end - at_);
        at_ = end;
        if (newline != std::string::npos) {
          ++at_;
          break;
        }
      }
      buffer_.resize(static_cast<std::size_t>(kReadChunkBytes));
      buffer_.resize(static_cast<std::size_t>(in_.read(buffer_.data(), kReadChunkBytes)));
      at_ = 0;
      if (buffer_.empty()) {
        if (!consumed) return false;
        break;
      }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }

 private:
  detail::GzipInput& in_;
  std::string buffer_;
  std::size_t at_ = 0;
};

// Calls on_piece(piece, line) for each piece of `text` between separators (the whole text
// without one), with the 1-based line it starts on.
template <typename F>
void for_each_piece(std::string_view text, const std::optional<std::string>& separator, F&& on_piece) {
  std::int64_t line = 1;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = separator ? text.find(*separator, start) : std::string_view::npos;
    if (end == std::string_view::npos) return on_piece(text.substr(start), line);
    on_piece(text.substr(start, end - start), line);
    const std::size_t next = end + separator->size();
    line += static_cast<std::int64_t>(std::count(text.data() + start, text.data() + next, '\n'));
    start = next;
  }
}

}  // namespace

std::vector<std::string> document_extensions(DocumentFormat format) {
  if (format == DocumentFormat::jsonl) return {".jsonl", ".jsonl.gz"};
  return {".txt", ".txt.gz"};
}

std::vector<std::string> list_document_files(const std::vector<std::string>& inputs, DocumentFormat format) {
  namespace fs = std::filesystem;
  const std::vector<std::string> extensions = document_extensions(format);
  const auto wanted = [&](const fs::path& path) {
    const std::string name = path.filename().string();
    return !name.starts_with(".") && std::any_of(extensions.begin(), extensions.end(), [&](const std::string& ext) {
      return name.size() > ext.size() && name.ends_with(ext);
    });
  };
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    WF_USER_CHECK(fs::exists(status), "prepare-text: input '{}' does not exist", input);
    if (fs::is_regular_file(status)) {
      WF_USER_CHECK(fs::file_size(input, ec) > 0 && !ec, "prepare-text: input file '{}' is empty", input);
      files.push_back(input);
      continue;
    }
    WF_USER_CHECK(fs::is_directory(status), "prepare-text: input '{}' is neither a file nor a folder", input);
    std::vector<std::string> found;
    for (fs::recursive_directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file() && wanted(it->path())) found.push_back(it->path().string());
    }
    WF_USER_CHECK(!ec, "prepare-text: cannot list folder '{}': {}", input, ec.message());
    WF_USER_CHECK(!found.empty(),
                  "prepare-text: folder '{}' holds no {} file ({}, searched recursively); give the files' folder, or "
                  "the format they are in with --format",
                  input, format_name(format), fmt::join(extensions, ", "));
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string unescape_separator(std::string_view text) {
  WF_USER_CHECK(!text.empty(), "prepare-text: --separator is empty; give the text between documents (e.g. '\\n\\n')");
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (next) {
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case '\\': out += '\\'; break;
      default:
        WF_USER_FAIL("prepare-text: --separator '{}' has the escape '\\{}'; the escapes are \\n, \\r, \\t and \\\\",
                     text, next == '\0' ? std::string() : std::string(1, next));
    }
    ++i;
  }
  return out;
}

std::string_view bad_record_kind_name(BadRecordKind kind) {
  switch (kind) {
    case BadRecordKind::invalid_utf8: return "invalid UTF-8";
    case BadRecordKind::invalid_json: return "invalid JSON";
    case BadRecordKind::not_an_object: return "not a JSON object";
    case BadRecordKind::missing_key: return "missing key";
    case BadRecordKind::not_a_string: return "key not a string";
  }
  return "bad record";
}

std::string BadRecordReport::summary() const {
  if (total == 0) return "no bad records";
  std::vector<std::string> parts;
  for (int k = 0; k < kBadRecordKinds; ++k) {
    const std::int64_t n = by_kind[static_cast<std::size_t>(k)];
    if (n > 0) parts.push_back(fmt::format("{} {}", n, bad_record_kind_name(static_cast<BadRecordKind>(k))));
  }
  return fmt::format("{} bad record{}: {}", total, total == 1 ? "" : "s", fmt::join(parts, ", "));
}

JsonlRecord parse_jsonl_record(std::string_view line, std::string_view text_key) {
  if (const std::size_t bad = first_invalid_utf8(line); bad != std::string_view::npos) {
    return {.text = std::nullopt,
            .problem = BadRecordKind::invalid_utf8,
            .reason = fmt::format("byte 0x{:02x} at column {} is not valid UTF-8",
                                  static_cast<unsigned char>(line[bad]), bad + 1)};
  }
  TextKeyHandler handler(text_key);
  nlohmann::json::sax_parse(line.begin(), line.end(), &handler);
  return std::move(handler).result(text_key);
}

DocumentReadTotals read_documents(const std::vector<std::string>& files, const DocumentReadOptions& options,
                                  const DocumentCallback& on_document,
                                  const std::function<void(std::int64_t)>& on_bytes) {
  DocumentReadTotals totals;
  BadRecords bad(totals.bad, options.max_bad_records);
  std::int64_t bytes_before = 0;  // on disk, of the files already read
  const std::string fix = "give a readable text or JSON Lines file (gzipped or not)";
  for (const std::string& path : files) {
    detail::GzipInput in(path, fmt::format("document file '{}'", path), "a text or JSON Lines file", fix);
    RecordPlace place{.file = path};
    const auto document = [&](std::string_view text) {
      if (is_blank(text)) {
        ++totals.empty_skipped;
      } else {
        ++totals.documents;
        on_document(text, place);
      }
      if (on_bytes) on_bytes(bytes_before + in.offset_on_disk());
    };
    if (options.format == DocumentFormat::text) {
      const std::string text = read_all(in);
      WF_USER_CHECK(!in.cut_short(), "document file '{}' is cut short (its gzip stream ends early); {}", path, fix);
      for_each_piece(text, options.separator, [&](std::string_view piece, std::int64_t line) {
        place.line = line;
        if (const std::size_t at = first_invalid_utf8(piece); at != std::string_view::npos) {
          const std::int64_t bad_line = line + std::count(piece.data(), piece.data() + at, '\n');
          bad.add(BadRecordKind::invalid_utf8, {path, bad_line},
                  fmt::format("byte 0x{:02x} is not valid UTF-8 (the document starting on line {} is skipped)",
                              static_cast<unsigned char>(piece[at]), line));
          return;
        }
        document(piece);
      });
    } else {
      LineReader lines(in);
      std::string line;
      for (place.line = 1; lines.next(line); ++place.line) {
        if (is_blank(line)) continue;  // not a record (a trailing newline, spacing)
        JsonlRecord record = parse_jsonl_record(line, options.text_key);
        if (!record.text) {
          bad.add(record.problem, place, record.reason);
          continue;
        }
        document(*record.text);
      }
      WF_USER_CHECK(!in.cut_short(), "document file '{}' is cut short (its gzip stream ends early); {}", path, fix);
    }
    ++totals.files;
    std::error_code ec;
    bytes_before += static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
    if (on_bytes) on_bytes(bytes_before);
  }
  return totals;
}

}  // namespace wf::data
