// src/cli/terminal_text.h: what `wallfacer generate` prints. Raw bytes when piped; on a terminal,
// control bytes as escapes and invalid UTF-8 as U+FFFD, with characters cut between pieces kept.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "src/cli/terminal_text.h"

using wf::cli::sanitize_for_terminal;
using wf::cli::TerminalSanitizer;
using wf::cli::TextPrinter;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// What a TextPrinter writes for `pieces`, read back from a temporary file.
std::string printed(const std::vector<std::string>& pieces, bool terminal) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  TextPrinter printer(terminal, file);
  for (const std::string& piece : pieces) printer.print(piece);
  printer.finish();
  std::rewind(file);
  std::string out;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) out += static_cast<char>(c);
  std::fclose(file);
  return out;
}

}  // namespace

TEST_CASE("terminal text: valid UTF-8, newlines and tabs pass unchanged", "[cli][terminal_text]") {
  const std::string text = "In the beginning\n\tcafé Привет 日本語 🎉 ~";
  CHECK(sanitize_for_terminal(text) == text);
  CHECK(sanitize_for_terminal("") == "");
}

TEST_CASE("terminal text: control bytes become visible escapes", "[cli][terminal_text]") {
  CHECK(sanitize_for_terminal(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(sanitize_for_terminal("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07");  // clear screen, set title
  CHECK(sanitize_for_terminal("a\rb\x7f") == "a\\x0db\\x7f");
  CHECK(sanitize_for_terminal("\xC2\x9B" "31m") == "\\u009b31m");  // C1 CSI
  CHECK(sanitize_for_terminal("\xC2\xA0") == "\xC2\xA0");          // U+00A0 is no control
}

TEST_CASE("terminal text: invalid UTF-8 becomes U+FFFD, one per bad byte", "[cli][terminal_text]") {
  CHECK(sanitize_for_terminal("a\xff" "b") == "a" + kFffd + "b");
  CHECK(sanitize_for_terminal("\xC0\xAF") == kFffd + kFffd);              // overlong '/'
  CHECK(sanitize_for_terminal("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // a surrogate
  CHECK(sanitize_for_terminal("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
  CHECK(sanitize_for_terminal("\xE2\x82") == kFffd);  // cut at the end of the text
  CHECK(sanitize_for_terminal("\xE2\x82x") == kFffd + kFffd + "x");
}

TEST_CASE("terminal text: a character cut between pieces is printed whole", "[cli][terminal_text]") {
  TerminalSanitizer s;
  CHECK(s.feed("caf\xC3") == "caf");
  CHECK(s.feed("\xA9 \xF0\x9F") == "\xC3\xA9 ");
  CHECK(s.feed("\x8E") == "");
  CHECK(s.feed("\x89!") == "\xF0\x9F\x8E\x89!");
  CHECK(s.finish() == "");
  CHECK(s.feed("\xE6\x97") == "");
  CHECK(s.finish() == kFffd);  // never completed
}

TEST_CASE("terminal text: the printer writes raw bytes, NULs included, unless on a terminal", "[cli][terminal_text]") {
  const std::string bytes("one\0two\x1b\xff\n", 10);
  CHECK(printed({bytes}, false) == bytes);
  CHECK(printed({bytes}, true) == "one\\x00two\\x1b" + kFffd + "\n");
  CHECK(printed({"\xE2", "\x82", "\xAC"}, true) == "\xE2\x82\xAC");  // € a byte at a time
  CHECK(printed({"\xE2", "\x82", "\xAC"}, false) == "\xE2\x82\xAC");
}
