// GPT-2's pre-tokenisation regex, by hand (see gpt2_tokenizer.h for the approximation):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// The alternatives are tried in order at each position, first match wins, as the regex does.
#include <cstdint>
#include <string_view>
#include <vector>

#include "wallfacer/data/gpt2_tokenizer.h"

namespace wf::data {
namespace {

enum class CharClass : std::uint8_t { letter, number, space, other };

struct Range {
  char32_t first, last;
};

// Code point ranges of \p{L} (General_Category L*) in the scripts listed in gpt2_tokenizer.h.
constexpr Range kLetters[] = {
    {U'A', U'Z'},         {U'a', U'z'},         {0x00AA, 0x00AA},     {0x00B5, 0x00B5},     {0x00BA, 0x00BA},
    {0x00C0, 0x00D6},     {0x00D8, 0x00F6},     {0x00F8, 0x02C1},     {0x02C6, 0x02D1},     {0x02E0, 0x02E4},
    {0x02EC, 0x02EC},     {0x02EE, 0x02EE},     {0x0370, 0x0374},     {0x0376, 0x0377},     {0x037A, 0x037D},
    {0x037F, 0x037F},     {0x0386, 0x0386},     {0x0388, 0x038A},     {0x038C, 0x038C},     {0x038E, 0x03A1},
    {0x03A3, 0x03F5},     {0x03F7, 0x0481},     {0x048A, 0x052F},     {0x0531, 0x0556},     {0x0559, 0x0559},
    {0x0560, 0x0588},     {0x05D0, 0x05EA},     {0x05EF, 0x05F2},     {0x0620, 0x064A},     {0x066E, 0x066F},
    {0x0671, 0x06D3},     {0x06D5, 0x06D5},     {0x0904, 0x0939},     {0x093D, 0x093D},     {0x0950, 0x0950},
    {0x0958, 0x0961},     {0x0971, 0x0980},     {0x1E00, 0x1FBC},     {0x3041, 0x3096},     {0x309D, 0x309F},
    {0x30A1, 0x30FA},     {0x30FC, 0x30FF},     {0x3400, 0x4DBF},     {0x4E00, 0x9FFF},     {0xAC00, 0xD7A3},
    {0xFF21, 0xFF3A},     {0xFF41, 0xFF5A},
};

// \p{N} (Nd, Nl, No) in the same scripts, plus the common superscripts, fractions and numerals.
constexpr Range kNumbers[] = {
    {U'0', U'9'},     {0x00B2, 0x00B3}, {0x00B9, 0x00B9}, {0x00BC, 0x00BE}, {0x0660, 0x0669}, {0x06F0, 0x06F9},
    {0x0966, 0x096F}, {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189},
    {0x2460, 0x249B}, {0x24EA, 0x24FF}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xFF10, 0xFF19},
};

// \s: the Unicode White_Space property, complete.
constexpr Range kSpaces[] = {
    {0x0009, 0x000D}, {0x0020, 0x0020}, {0x0085, 0x0085}, {0x00A0, 0x00A0}, {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

template <std::size_t N>
bool in_ranges(char32_t c, const Range (&ranges)[N]) {
  for (const Range& r : ranges) {
    if (c >= r.first && c <= r.last) return true;
  }
  return false;
}

CharClass classify(char32_t c) {
  if (c < 0x80) {  // the common case, without the tables
    if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) return CharClass::letter;
    if (c >= U'0' && c <= U'9') return CharClass::number;
    if (c == U' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::space;
    return CharClass::other;
  }
  if (in_ranges(c, kLetters)) return CharClass::letter;
  if (in_ranges(c, kNumbers)) return CharClass::number;
  if (in_ranges(c, kSpaces)) return CharClass::space;
  return CharClass::other;
}

// One character of the text: where its bytes start, and its code point (an invalid byte
// stands alone, as U+FFFD, which classifies as `other`).
struct Char {
  std::size_t offset;
  char32_t code;
};

// Decodes one UTF-8 sequence at text[i]; returns its length (1 for an invalid byte).
std::size_t decode_utf8(std::string_view text, std::size_t i, char32_t& code) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  std::size_t length = 0;
  char32_t min_code = 0;
  if (b0 < 0x80) {
    code = b0;
    return 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    length = 2, code = b0 & 0x1F, min_code = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, code = b0 & 0x0F, min_code = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, code = b0 & 0x07, min_code = 0x10000;
  }
  if (length == 0 || i + length > text.size()) {
    code = 0xFFFD;
    return 1;
  }
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      code = 0xFFFD;
      return 1;
    }
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
    code = 0xFFFD;
    return 1;
  }
  return length;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t code = 0;
    const std::size_t length = decode_utf8(text, i, code);
    chars.push_back({i, code});
    i += length;
  }
  const std::size_t n = chars.size();
  std::vector<CharClass> classes(n);
  for (std::size_t i = 0; i < n; ++i) classes[i] = classify(chars[i].code);

  const auto code_at = [&](std::size_t k) { return k < n ? chars[k].code : char32_t{0}; };
  const auto offset_of = [&](std::size_t k) { return k < n ? chars[k].offset : text.size(); };
  // The end of the run, from k, of characters whose class `in_class` accepts.
  const auto run_end = [&](std::size_t k, auto&& in_class) {
    while (k < n && in_class(classes[k])) ++k;
    return k;
  };

  std::vector<std::string_view> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (code_at(i) == U'\'') {
      const char32_t a = code_at(i + 1), b = code_at(i + 2);
      if (a == U's' || a == U't' || a == U'm' || a == U'd') {
        end = i + 2;
      } else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
        end = i + 3;
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
    const std::size_t start = code_at(i) == U' ' ? i + 1 : i;
    for (const CharClass cls : {CharClass::letter, CharClass::number, CharClass::other}) {
      if (end != i || start >= n || classes[start] != cls) continue;
      end = run_end(start, [cls](CharClass c) { return c == cls; });
    }
    // '\s+(?!\S)|\s+': a whitespace run, less its last character when text follows it (that
    // character then leads the next piece, as the ' ?' above expects).
    if (end == i && classes[i] == CharClass::space) {
      end = run_end(i, [](CharClass c) { return c == CharClass::space; });
      if (end < n && end - i >= 2) --end;
    }
    // Unreachable in practice (every class is handled above); guarantees progress regardless.
    if (end == i) end = i + 1;
    pieces.push_back(text.substr(offset_of(i), offset_of(end) - offset_of(i)));
    i = end;
  }
  return pieces;
}

}  // namespace wf::data
