#pragma once
// GPT token files: what `wallfacer prepare-text` writes and training reads.
//
// Layout (all little-endian):
//   offset 0   8 bytes  magic "WFTOKENS"
//   offset 8   u32      format version (kTokenFileVersion)
//   offset 12  u32      bytes per token: 2 (uint16) or 4 (uint32)
//   offset 16  u64      token count
//   offset 24  count tokens of that width
// The file size is exactly 24 + count * width; anything else is a damaged file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace wf::data {

inline constexpr char kTokenFileMagic[8] = {'W', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr std::uint32_t kTokenFileVersion = 1;
inline constexpr std::int64_t kTokenFileHeaderBytes = 24;

// Bytes per token for a vocabulary: 2 when every id fits in uint16 (vocab_size <= 65536), else 4.
int token_bytes_for_vocab(std::int64_t vocab_size);

// Writes `tokens` (each < vocab_size) to `path` atomically: into a temporary file in the same
// directory, fsync'd, then renamed over `path`. On any failure (an id out of range, a full
// disk, ...) the temporary file is removed and whatever was at `path` before is left untouched.
void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab_size);

// A token file mapped read-only into memory: opening is O(1), pages load as they are read, and
// processes reading the same file share them. Throws wf::Error naming the file and what is
// wrong with it when it is not a valid token file. Move-only.
//
// The file stays open while mapped: at() and copy() check its size (one fstat) before reading, so a file
// truncated in place by another process while a run reads it is a wf::Error naming the file,
// not a SIGBUS (reading a mapped page past the new end). A truncation between that check and
// the read itself still faults; replacing the file by rename (what write_token_file does) is
// always safe, since the mapping keeps the old contents.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t size() const { return count_; }            // tokens
  int token_bytes() const { return token_bytes_; }        // 2 or 4
  std::uint32_t at(std::int64_t index) const;             // bounds- and size-checked (not for loops)
  // Widens tokens [start, start + n) into out[0, n) (int64, the index dtype of embeddings).
  // wf::Error naming the file when it has shrunk since it was opened.
  void copy(std::int64_t start, std::int64_t n, std::int64_t* out) const;

 private:
  void unmap() noexcept;
  // wf::Error naming the file when it is now shorter than the mapping (truncated in place).
  void check_not_shrunk() const;

  std::string path_;
  int fd_ = -1;  // kept open for check_not_shrunk's fstat
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;  // first token, inside the mapping
  std::int64_t count_ = 0;
  int token_bytes_ = 0;
};

}  // namespace wf::data
