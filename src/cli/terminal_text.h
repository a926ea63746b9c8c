#pragma once
// Printing model output, which is arbitrary bytes (a byte-level model may sample NUL, ESC or
// half a UTF-8 character). Piped or redirected, the bytes go out exactly, NULs included. On a
// terminal they are made harmless first: control bytes other than \n and \t become visible
// escapes ("\x1b", "\u009b") so that no sampled escape sequence moves the cursor or recolours
// the screen, and bytes that are not valid UTF-8 become U+FFFD.
#include <cstdio>
#include <string>
#include <string_view>

namespace wf::cli {

// Turns bytes into text safe for a terminal, as above. Bytes may come in pieces (a token at a
// time): a UTF-8 character cut between two pieces is held back until its rest arrives.
class TerminalSanitizer {
 public:
  // The safe text for `bytes`, less a trailing incomplete character (kept for the next call).
  std::string feed(std::string_view bytes);
  // U+FFFD for a character left incomplete at the end of the text ("" when there is none).
  std::string finish();

 private:
  std::string pending_;  // the start of a UTF-8 character whose rest has not arrived
};

// feed(bytes) + finish() of a fresh TerminalSanitizer: for a whole text.
std::string sanitize_for_terminal(std::string_view bytes);

// Writes bytes to stdout with fwrite (printf("%s") would stop at a NUL): sanitized when
// `terminal`, exactly as given otherwise. For a whole text; a stream of pieces goes through
// TextPrinter, which keeps characters cut between pieces whole.
void print_text(std::string_view bytes, bool terminal);

// print_text for a text that arrives in pieces, e.g. one token at a time.
class TextPrinter {
 public:
  explicit TextPrinter(bool terminal, std::FILE* out = stdout) : terminal_(terminal), out_(out) {}
  void print(std::string_view bytes);
  void finish();  // flushes what a cut character held back; call once after the last piece

 private:
  bool terminal_;
  std::FILE* out_;
  TerminalSanitizer sanitizer_;
};

// Whether stdout is a terminal (isatty).
bool stdout_is_terminal();

}  // namespace wf::cli
