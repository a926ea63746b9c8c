#include "src/config/yaml_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>
#include <yaml-cpp/eventhandler.h>

#include "wallfacer/core/error.h"

namespace wf::config::detail {
namespace {

constexpr const char* kExample = "e.g. configs/gpt-tiny.yaml";

// Closes the descriptor on every way out of read_config_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// 1-based line and column of byte `offset` of `text`.
struct Position {
  std::size_t line = 1, column = 1;
};
Position position_of(std::string_view text, std::size_t offset) {
  Position p;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

// The first byte at which the nesting of `text` may exceed `limit`, or npos. An upper bound of
// yaml-cpp's depth, computed without recursion: the open flow collections ('[' and '{', quoted
// or not; a comment hides nothing, as '#' after a space starts one in every context but a
// quoted string, where brackets do not nest anyway) plus the block indicators that open the
// current line ("- - - x" nests three sequences). Nesting by indentation alone needs ~n²/2
// bytes for n levels, which kMaxConfigBytes keeps far below a stack's worth.
std::size_t first_too_deep(std::string_view text, int limit) {
  int flow = 0, line_indicators = 0;
  bool line_start = true, comment = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      line_start = true;
      comment = false;
      line_indicators = 0;
      continue;
    }
    if (comment) continue;
    const bool space_before = i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n';
    const char next = i + 1 < text.size() ? text[i + 1] : '\n';
    if (c == '#' && space_before) {
      comment = true;
    } else if (line_start && (c == '-' || c == '?') && (next == ' ' || next == '\t' || next == '\n')) {
      ++line_indicators;
    } else if (c == '[' || c == '{') {
      ++flow;
    } else if ((c == ']' || c == '}') && flow > 0) {
      --flow;
    }
    if (c != ' ' && c != '\t' && c != '-' && c != '?') line_start = false;
    if (flow + line_indicators > limit) return i;
  }
  return std::string_view::npos;
}

// Refuses what yaml-cpp must not be given; each message names the source and the line.
void check_text(std::string_view text, std::string_view source) {
  WF_USER_CHECK(text.size() <= kMaxConfigBytes,
                "{}: {} bytes is no run config (the limit is {} bytes; a config is a few KiB of YAML): is it the "
                "right file?",
                source, text.size(), kMaxConfigBytes);
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const Position p = position_of(text, nul);
    WF_USER_FAIL("{}:{}:{}: the text holds a NUL byte: this is a binary or corrupted file, not a YAML run config",
                 source, p.line, p.column);
  }
  if (const std::size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    const Position p = position_of(text, bad);
    WF_USER_FAIL("{}:{}:{}: byte 0x{:02x} is not valid UTF-8: a YAML run config is UTF-8 text (re-save it as UTF-8)",
                 source, p.line, p.column, static_cast<unsigned char>(text[bad]));
  }
  if (const std::size_t deep = first_too_deep(text, kMaxConfigNesting); deep != std::string_view::npos) {
    const Position p = position_of(text, deep);
    WF_USER_FAIL("{}:{}:{}: lists or mappings nested more than {} levels deep, but a run config has two (section:, "
                 "then key: value): this is not a run config",
                 source, p.line, p.column, kMaxConfigNesting);
  }
}

// The 1-based line of the "---" that opens the document yaml-cpp marks at 0-based `mark_line`
// (its mark is where the content starts), or that line itself when none precedes it ("...").
std::size_t separator_line(std::string_view text, std::size_t mark_line) {
  std::size_t found = mark_line + 1, line = 1;
  for (std::size_t start = 0; start < text.size() && line <= mark_line + 1; ++line) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view row = text.substr(start, end - start);
    if (row.starts_with("---") && (row.size() == 3 || row[3] == ' ' || row[3] == '\t' || row[3] == '\r')) {
      found = line;
    }
    start = end + 1;
  }
  return found;
}

// Where each of the first documents of a YAML stream starts, from yaml-cpp's event parser: all
// parse_yaml_document needs to tell one document from several, without YAML::LoadAll. That one
// loops forever, appending a null document each turn, on a stray flow indicator outside any
// flow collection ("," or "[a] ,": yaml-cpp 0.7, jbeder/yaml-cpp#1040, fixed upstream after
// 0.8): the parser then returns a document at the same token without consuming it.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The start marks of at most `limit` documents of `text`; yaml-cpp's exceptions pass through.
std::vector<YAML::Mark> document_starts(const std::string& text, std::size_t limit) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (starts.marks.size() < limit && parser.HandleNextDocument(starts)) {
  }
  return starts.marks;
}

}  // namespace

std::string read_config_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO nobody writes to must not block; cleared below for the reads.
  const Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  WF_USER_CHECK(file.fd >= 0, "cannot read config file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  WF_USER_CHECK(::fstat(file.fd, &st) == 0, "cannot read config file '{}': {}", path, std::strerror(errno));
  WF_USER_CHECK(!S_ISDIR(st.st_mode), "config file '{}' is a directory: give the YAML file itself ({})", path, kExample);
  WF_USER_CHECK(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode),
                "config file '{}' is not a regular file (a device or socket): give a YAML file ({})", path, kExample);
  ::fcntl(file.fd, F_SETFL, ::fcntl(file.fd, F_GETFL) & ~O_NONBLOCK);

  // One byte past the limit tells an oversized file apart without reading all of it.
  std::string text;
  std::vector<char> chunk(1 << 16);
  while (text.size() <= kMaxConfigBytes) {
    const ssize_t n = ::read(file.fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    WF_USER_CHECK(n >= 0, "cannot read config file '{}': {}", path, std::strerror(errno));
    if (n == 0) break;
    text.append(chunk.data(), static_cast<std::size_t>(n));
  }
  WF_USER_CHECK(text.size() <= kMaxConfigBytes,
                "config file '{}' is larger than {} bytes, but a run config is a few KiB of YAML: is it the right "
                "file?",
                path, kMaxConfigBytes);
  // A pipe nobody wrote to reads as end of file at once: that is no config, not an empty one
  // (which would silently train every default).
  WF_USER_CHECK(!S_ISFIFO(st.st_mode) || !text.empty(),
                "config file '{}' is a pipe that delivered nothing (no writer yet?): give a YAML file ({})", path,
                kExample);
  return text;
}

YAML::Node parse_yaml_document(std::string_view text, std::string_view source) {
  check_text(text, source);
  const std::string yaml(text);
  try {
    // Three starts tell a second document (yaml-cpp's Load would keep the first and drop the
    // rest without a word) from a parser stuck on a token: two documents at one mark.
    const std::vector<YAML::Mark> starts = document_starts(yaml, 3);
    for (std::size_t i = 1; i < starts.size(); ++i) {
      if (starts[i].pos == starts[i - 1].pos) {
        const std::size_t at = static_cast<std::size_t>(starts[i].pos);
        WF_USER_FAIL("{}:{}:{}: YAML syntax error: unexpected '{}' outside a [list] or {{mapping}}", source,
                     starts[i].line + 1, starts[i].column + 1, at < yaml.size() ? yaml.substr(at, 1) : "");
      }
    }
    if (starts.size() > 1) {
      WF_USER_FAIL("{}:{}: a second YAML document starts here ('---' separates documents), but a run config is one "
                   "document: remove the line or move what follows into its own file",
                   source, separator_line(text, static_cast<std::size_t>(starts[1].line)));
    }
    // One document (or none): Load parses what document_starts just parsed without a hitch.
    return YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    WF_USER_FAIL("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

}  // namespace wf::config::detail
