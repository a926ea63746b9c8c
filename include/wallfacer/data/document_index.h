#pragma once
// Document indexes: where each document of a token file starts. `wallfacer prepare-text` writes
// one beside each token file (train.bin -> train.docs); the loader reads it to pack documents
// (data.pack, docs/data.md "Packed documents").
//
// Layout (all little-endian):
//   offset 0   8 bytes  magic "WFDOCIDX"
//   offset 8   u32      format version (kDocumentIndexVersion)
//   offset 12  u32      the end-of-text token appended after each document, or kNoEndOfText
//   offset 16  u64      token count of the token file it indexes
//   offset 24  u64      document count D
//   offset 32  D × u64  each document's first token: 0 first, strictly increasing, each < token count
// The file is exactly 32 + 8·D bytes; D is 0 exactly when the token count is 0. Document d is the
// tokens [start[d], start[d + 1]) (the last one ends at the token count) and, with an
// end-of-text token, ends with it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wf::data {

inline constexpr char kDocumentIndexMagic[8] = {'W', 'F', 'D', 'O', 'C', 'I', 'D', 'X'};
inline constexpr std::uint32_t kDocumentIndexVersion = 1;
inline constexpr std::int64_t kDocumentIndexHeaderBytes = 32;
inline constexpr std::uint32_t kNoEndOfText = 0xFFFFFFFFu;

struct DocumentIndex {
  std::int64_t token_count = 0;
  std::vector<std::int64_t> starts;          // each document's first token
  std::optional<std::uint32_t> end_of_text;  // the token closing every document, if the tokenizer has one
  std::int64_t documents() const { return static_cast<std::int64_t>(starts.size()); }
  friend bool operator==(const DocumentIndex&, const DocumentIndex&) = default;
};

// The index beside a token file: its extension replaced by ".docs" (data/x/train.bin ->
// data/x/train.docs; a name without one gets ".docs" appended).
std::string document_index_path(const std::string& token_path);

// wf::Error naming `what` (the file, for messages) and the broken rule when `index` breaks one of
// the layout's rules above.
void check_document_index(const DocumentIndex& index, const std::string& what);

// Writes `index` (checked first) to `path` atomically, as write_token_file does.
void write_document_index(const std::string& path, const DocumentIndex& index);

// Reads and checks the index at `path`. wf::Error naming the file, the problem (missing, wrong
// magic, unknown version, truncated, trailing bytes, a count or start that breaks the rules) and
// the fix (re-run prepare-text). Memory is allocated only for the documents the file holds.
DocumentIndex read_document_index(const std::string& path);

}  // namespace wf::data
