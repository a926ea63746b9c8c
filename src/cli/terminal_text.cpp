#include "src/cli/terminal_text.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Length of the UTF-8 character that starts at s[0], 0 when s[0] cannot start one, or -n when
// s holds only a valid prefix of it (n = the bytes seen). Overlong forms, surrogates and code
// points past U+10FFFF are invalid (RFC 3629).
int utf8_length(std::string_view s) {
  const auto b0 = static_cast<std::uint8_t>(s[0]);
  int length = 0;
  std::uint8_t low = 0x80, high = 0xBF;  // the range of the second byte
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) low = 0xA0;   // overlong
    if (b0 == 0xED) high = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) low = 0x90;   // overlong
    if (b0 == 0xF4) high = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  for (int i = 1; i < length; ++i) {
    if (static_cast<std::size_t>(i) >= s.size()) return -i;
    const auto b = static_cast<std::uint8_t>(s[static_cast<std::size_t>(i)]);
    const bool ok = i == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
  }
  return length;
}

// C0 controls and DEL, but the two a text needs.
bool is_control_byte(std::uint8_t b) { return (b < 0x20 && b != '\n' && b != '\t') || b == 0x7F; }

// U+0080..U+009F, which some terminals obey as controls (U+009B is CSI), encoded C2 80..C2 9F.
bool is_c1_control(std::string_view character) {
  return character.size() == 2 && static_cast<std::uint8_t>(character[0]) == 0xC2 &&
         static_cast<std::uint8_t>(character[1]) <= 0x9F;
}

// Sends what `out` buffered; a failed write (a full disk, a closed pipe) is an error, not lost text.
void flush(std::FILE* out) {
  WF_USER_CHECK(std::fflush(out) == 0 && std::ferror(out) == 0, "cannot write the text to {}: {}",
                out == stdout ? "standard output" : "the output", std::strerror(errno));
}

}  // namespace

std::string TerminalSanitizer::feed(std::string_view bytes) {
  std::string text = pending_ + std::string(bytes);
  pending_.clear();
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const std::string_view rest = std::string_view(text).substr(i);
    const int length = utf8_length(rest);
    if (length < 0) {  // a character cut at the end of this piece
      pending_ = std::string(rest);
      break;
    }
    if (length == 0) {  // one replacement per invalid byte; the next byte starts afresh
      out += kReplacement;
      ++i;
      continue;
    }
    const std::string_view character = rest.substr(0, static_cast<std::size_t>(length));
    const auto b0 = static_cast<std::uint8_t>(character[0]);
    if (length == 1 && is_control_byte(b0)) {
      out += fmt::format("\\x{:02x}", b0);
    } else if (is_c1_control(character)) {
      out += fmt::format("\\u{:04x}", static_cast<std::uint8_t>(character[1]));
    } else {
      out += character;
    }
    i += static_cast<std::size_t>(length);
  }
  return out;
}

std::string TerminalSanitizer::finish() {
  const bool cut = !pending_.empty();
  pending_.clear();
  return cut ? std::string(kReplacement) : std::string();
}

std::string sanitize_for_terminal(std::string_view bytes) {
  TerminalSanitizer sanitizer;
  std::string text = sanitizer.feed(bytes);  // before finish(): the order of a + b is unspecified
  return text + sanitizer.finish();
}

void TextPrinter::print(std::string_view bytes) {
  if (terminal_) {
    const std::string text = sanitizer_.feed(bytes);
    std::fwrite(text.data(), 1, text.size(), out_);
  } else {
    std::fwrite(bytes.data(), 1, bytes.size(), out_);
  }
  flush(out_);  // a piece at a time is meant to be seen as it comes
}

void TextPrinter::finish() {
  const std::string rest = sanitizer_.finish();
  std::fwrite(rest.data(), 1, rest.size(), out_);
  flush(out_);
}

void print_text(std::string_view bytes, bool terminal) {
  TextPrinter printer(terminal);
  printer.print(bytes);
  printer.finish();
}

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

}  // namespace wf::cli
