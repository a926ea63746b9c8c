#include "wallfacer/data/gpt2_tokenizer.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

constexpr const char* kHowToFetch = "run scripts/fetch-gpt2-bpe.sh (it downloads them into data/gpt2/) or pass the "
                                    "directory that holds encoder.json and vocab.bpe";
// Distinct pre-tokens remembered; past this the cache starts over, so memory stays bounded on
// huge corpora while the frequent words are back in it almost at once.
constexpr std::size_t kCacheLimit = 1 << 20;

std::string utf8(char32_t code) {
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {  // bytes_to_unicode only reaches U+0143
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others (control
// characters, space, ...) for U+0100 upwards, so that every token is a printable string.
std::array<std::string, 256> bytes_to_unicode() {
  std::array<std::string, 256> table;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[static_cast<std::size_t>(b)] = utf8(printable ? static_cast<char32_t>(b) : next++);
  }
  return table;
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  WF_CHECK(std::filesystem::is_regular_file(path, ec), "gpt2 tokenizer: '{}' does not exist; {}", path.string(),
           kHowToFetch);
  std::ifstream in(path, std::ios::binary);
  WF_CHECK(in.good(), "gpt2 tokenizer: cannot open '{}' for reading (check its permissions)", path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

struct Gpt2Tokenizer::State {
  std::array<std::string, 256> byte_symbol;                   // byte -> its one-character symbol
  std::unordered_map<std::string, std::uint32_t> encoder;     // symbol string -> id
  std::vector<std::string> id_bytes;                          // id -> the raw bytes it stands for
  std::unordered_map<std::string, int> merge_rank;            // "left right" -> rank (lower merges first)
  std::uint32_t end_of_text = 0;

  std::mutex cache_mutex;
  std::unordered_map<std::string, std::vector<std::uint32_t>> cache;  // pre-token bytes -> ids

  std::vector<std::uint32_t> encode_piece(std::string_view piece) const;
};

// OpenAI's bpe(): merge the adjacent pair of lowest rank, everywhere it occurs (left to right,
// without overlaps), until no adjacent pair has a rank.
std::vector<std::uint32_t> Gpt2Tokenizer::State::encode_piece(std::string_view piece) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (const char c : piece) word.push_back(byte_symbol[static_cast<unsigned char>(c)]);

  std::string key;
  while (word.size() > 1) {
    int best_rank = std::numeric_limits<int>::max();
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      const auto found = merge_rank.find(key);
      if (found != merge_rank.end() && found->second < best_rank) best_rank = found->second, best = i;
    }
    if (best_rank == std::numeric_limits<int>::max()) break;
    const std::string left = word[best], right = word[best + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        merged.push_back(left + right);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        i += 1;
      }
    }
    word = std::move(merged);
  }

  std::vector<std::uint32_t> ids;
  ids.reserve(word.size());
  for (const std::string& symbol : word) {
    const auto found = encoder.find(symbol);
    WF_CHECK(found != encoder.end(),
             "gpt2 tokenizer: BPE produced '{}', which encoder.json does not hold: encoder.json and vocab.bpe do not "
             "belong together; {}",
             symbol, kHowToFetch);
    ids.push_back(found->second);
  }
  return ids;
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : state_(std::make_unique<State>()) {
  namespace fs = std::filesystem;
  State& s = *state_;
  s.byte_symbol = bytes_to_unicode();
  std::unordered_map<std::string, unsigned char> symbol_byte;
  for (int b = 0; b < 256; ++b) symbol_byte[s.byte_symbol[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);

  // encoder.json: {"symbol string": id, ...}
  const fs::path encoder_path = fs::path(dir) / "encoder.json";
  nlohmann::json encoder_json;
  try {
    encoder_json = nlohmann::json::parse(read_file(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    WF_FAIL("gpt2 tokenizer: '{}' is not valid JSON ({}); {}", encoder_path.string(), e.what(), kHowToFetch);
  }
  WF_CHECK(encoder_json.is_object() && !encoder_json.empty(),
           "gpt2 tokenizer: '{}' is not a JSON object of token -> id; {}", encoder_path.string(), kHowToFetch);
  s.id_bytes.resize(encoder_json.size());
  // The token of each id seen so far: two tokens of one id would make decode return the other
  // one's bytes (decode(encode(text)) != text). With every id below the count, distinct ids also
  // leave none without a token. The pointers are to encoder_json's keys, which outlive the loop.
  std::vector<const std::string*> token_of_id(encoder_json.size(), nullptr);
  for (const auto& [symbol, id_json] : encoder_json.items()) {
    WF_CHECK(id_json.is_number_unsigned() && id_json.get<std::uint64_t>() < encoder_json.size(),
             "gpt2 tokenizer: '{}' maps '{}' to {}, not an id in [0, {}); {}", encoder_path.string(), symbol,
             id_json.dump(), encoder_json.size(), kHowToFetch);
    const auto id = id_json.get<std::uint32_t>();
    WF_CHECK(token_of_id[id] == nullptr, "gpt2 tokenizer: '{}' maps both '{}' and '{}' to id {}: each id names one "
             "token; {}", encoder_path.string(), *token_of_id[id], symbol, id, kHowToFetch);
    token_of_id[id] = &symbol;
    // The bytes this id stands for: each of its characters is one byte's symbol.
    std::string bytes;
    for (std::size_t i = 0; i < symbol.size();) {
      const std::size_t length = static_cast<unsigned char>(symbol[i]) < 0x80 ? 1 : 2;  // symbols are < U+0800
      const auto found = symbol_byte.find(symbol.substr(i, length));
      WF_CHECK(found != symbol_byte.end(),
               "gpt2 tokenizer: '{}' holds the token '{}', which is not made of byte symbols (bytes_to_unicode); {}",
               encoder_path.string(), symbol, kHowToFetch);
      bytes += static_cast<char>(found->second);
      i += length;
    }
    s.id_bytes[id] = std::move(bytes);
    s.encoder.emplace(symbol, id);
  }
  const auto eot = s.encoder.find("<|endoftext|>");
  WF_CHECK(eot != s.encoder.end(), "gpt2 tokenizer: '{}' has no <|endoftext|> token; {}", encoder_path.string(),
           kHowToFetch);
  s.end_of_text = eot->second;

  // vocab.bpe: a "#version" line, then one merge "left right" per line in rank order.
  const fs::path merges_path = fs::path(dir) / "vocab.bpe";
  const std::string merges = read_file(merges_path);
  std::size_t line_start = 0;
  int rank = 0;
  for (int line_number = 1; line_start < merges.size(); ++line_number) {
    std::size_t line_end = merges.find('\n', line_start);
    if (line_end == std::string::npos) line_end = merges.size();
    const std::string_view line(merges.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    if (line.empty() || line.starts_with("#version")) continue;
    const std::size_t space = line.find(' ');
    WF_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string_view::npos,
             "gpt2 tokenizer: line {} of '{}' is not a merge 'left right'; {}", line_number, merges_path.string(),
             kHowToFetch);
    s.merge_rank.emplace(std::string(line), rank++);
  }
  WF_CHECK(rank > 0, "gpt2 tokenizer: '{}' holds no merges; {}", merges_path.string(), kHowToFetch);
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::int64_t Gpt2Tokenizer::vocab_size() const { return static_cast<std::int64_t>(state_->id_bytes.size()); }

std::uint32_t Gpt2Tokenizer::end_of_text() const { return state_->end_of_text; }

std::vector<std::uint32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  State& s = *state_;
  std::vector<std::uint32_t> ids;
  ids.reserve(text.size() / 3);
  const std::lock_guard<std::mutex> lock(s.cache_mutex);
  for (const std::string_view piece : gpt2_pretokenize(text)) {
    auto found = s.cache.find(std::string(piece));
    if (found == s.cache.end()) {
      if (s.cache.size() >= kCacheLimit) s.cache.clear();
      found = s.cache.emplace(std::string(piece), s.encode_piece(piece)).first;
    }
    ids.insert(ids.end(), found->second.begin(), found->second.end());
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(std::span<const std::uint32_t> tokens) const {
  const State& s = *state_;
  std::string text;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    WF_CHECK(tokens[i] < s.id_bytes.size(), "gpt2 tokenizer: token {} at index {} is outside the vocabulary (size {})",
             tokens[i], i, s.id_bytes.size());
    text += s.id_bytes[tokens[i]];  // "<|endoftext|>" is printable ASCII: its bytes are its name
  }
  return text;
}

}  // namespace wf::data
