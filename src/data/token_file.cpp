#include "wallfacer/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "src/core/atomic_file.h"
#include "src/data/little_endian.h"
#include "wallfacer/core/error.h"

namespace wf::data {
namespace {

using detail::get;
using detail::put;

constexpr const char* kHowToFix = "re-run `wallfacer prepare-text` to rewrite it";
constexpr std::int64_t kWriteChunkTokens = 1 << 16;

// Narrows tokens[begin, end) to `width` bytes each, checking each id against the vocabulary.
void encode_chunk(const std::vector<std::uint32_t>& tokens, std::int64_t begin, std::int64_t end, int width,
                  std::int64_t vocab_size, const std::string& path, std::vector<unsigned char>& out) {
  out.resize(static_cast<std::size_t>((end - begin) * width));
  unsigned char* at = out.data();
  for (std::int64_t i = begin; i < end; ++i, at += width) {
    const std::uint32_t token = tokens[static_cast<std::size_t>(i)];
    WF_CHECK(token < vocab_size, "write_token_file: token {} at index {} is outside the vocabulary (size {}) for '{}'",
             token, i, vocab_size, path);
    if (width == 2) {
      put(at, static_cast<std::uint16_t>(token));
    } else {
      put(at, token);
    }
  }
}

}  // namespace

int token_bytes_for_vocab(std::int64_t vocab_size) {
  WF_CHECK(vocab_size > 0 && vocab_size <= (std::int64_t{1} << 32),
           "token files hold ids of vocabularies of 1 to 2^32 tokens, not {}", vocab_size);
  return vocab_size <= 65536 ? 2 : 4;
}

void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab_size) {
  const int width = token_bytes_for_vocab(vocab_size);
  wf::detail::AtomicFile file(path, "write_token_file");
  unsigned char header[kTokenFileHeaderBytes];
  std::memcpy(header, kTokenFileMagic, sizeof(kTokenFileMagic));
  put(header + 8, kTokenFileVersion);
  put(header + 12, static_cast<std::uint32_t>(width));
  put(header + 16, static_cast<std::uint64_t>(tokens.size()));
  file.write(header, sizeof(header));

  std::vector<unsigned char> chunk;
  const auto count = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t begin = 0; begin < count; begin += kWriteChunkTokens) {
    const std::int64_t end = std::min(count, begin + kWriteChunkTokens);
    encode_chunk(tokens, begin, end, width, vocab_size, path, chunk);
    file.write(chunk.data(), chunk.size());
  }
  file.commit();
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  WF_CHECK(fd >= 0, "token file '{}': cannot open it: {}; {}", path, wf::detail::errno_text(), kHowToFix);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string reason = wf::detail::errno_text();
    ::close(fd);
    WF_FAIL("token file '{}': cannot stat it: {}", path, reason);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    WF_USER_FAIL("token file '{}' is {}, not a token file: give the train.bin or val.bin file that `wallfacer "
                 "prepare-text` wrote{}",
                 path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (a device, pipe or socket)",
                 S_ISDIR(st.st_mode) ? fmt::format(" (e.g. {}/train.bin)", path) : "");
  }
  const auto file_bytes = static_cast<std::int64_t>(st.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    WF_FAIL("token file '{}' is truncated: {} bytes, shorter than its {}-byte header; {}", path, file_bytes,
            kTokenFileHeaderBytes, kHowToFix);
  }
  void* mapping = ::mmap(nullptr, static_cast<std::size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    const std::string reason = wf::detail::errno_text();
    ::close(fd);
    WF_FAIL("token file '{}': cannot map it into memory: {}", path, reason);
  }
  fd_ = fd;  // kept for check_not_shrunk; unmap() closes it
  mapping_ = mapping;
  mapping_bytes_ = static_cast<std::size_t>(file_bytes);

  try {
    const auto* bytes = static_cast<const unsigned char*>(mapping_);
    WF_CHECK(std::memcmp(bytes, kTokenFileMagic, sizeof(kTokenFileMagic)) == 0,
             "token file '{}' has the wrong magic (expected \"WFTOKENS\"): it is not a wallfacer token file; {}", path,
             kHowToFix);
    const auto version = get<std::uint32_t>(bytes + 8);
    WF_CHECK(version == kTokenFileVersion,
             "token file '{}' has unknown format version {} (this build reads version {}); {}", path, version,
             kTokenFileVersion, kHowToFix);
    const auto width = get<std::uint32_t>(bytes + 12);
    WF_CHECK(width == 2 || width == 4,
             "token file '{}' has unsupported token dtype {} (expected 2 for uint16 or 4 for uint32); {}", path, width,
             kHowToFix);
    const auto count = get<std::uint64_t>(bytes + 16);
    const auto payload = static_cast<std::uint64_t>(file_bytes - kTokenFileHeaderBytes);
    WF_CHECK(count <= payload / width,
             "token file '{}' is truncated: its header says {} tokens of uint{} but only {} bytes follow the header "
             "(room for {}); {}",
             path, count, width * 8, payload, payload / width, kHowToFix);
    WF_CHECK(count * width == payload,
             "token file '{}' is damaged: {} bytes follow its {} tokens of uint{} (the header and the file size "
             "disagree); {}",
             path, payload - count * width, count, width * 8, kHowToFix);
    tokens_ = bytes + kTokenFileHeaderBytes;
    count_ = static_cast<std::int64_t>(count);
    token_bytes_ = static_cast<int>(width);
  } catch (...) {
    unmap();
    throw;
  }
}

TokenFile::~TokenFile() { unmap(); }

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    token_bytes_ = std::exchange(other.token_bytes_, 0);
  }
  return *this;
}

void TokenFile::unmap() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
}

std::uint32_t TokenFile::at(std::int64_t index) const {
  WF_CHECK(index >= 0 && index < count_, "token file '{}': index {} is out of range [0, {})", path_, index, count_);
  check_not_shrunk();
  const unsigned char* p = tokens_ + index * token_bytes_;
  return token_bytes_ == 2 ? get<std::uint16_t>(p) : get<std::uint32_t>(p);
}

void TokenFile::check_not_shrunk() const {
  struct stat st {};
  WF_CHECK(::fstat(fd_, &st) == 0, "token file '{}': cannot stat it: {}", path_, wf::detail::errno_text());
  WF_CHECK(static_cast<std::uint64_t>(st.st_size) >= mapping_bytes_,
           "token file '{}' shrank to {} bytes while this run reads it (it had {} when opened): another process "
           "truncated or rewrote it in place, and reading on would crash (SIGBUS); restore the file (re-run "
           "`wallfacer prepare-text`, which replaces it atomically) and resume the run, and do not modify a token "
           "file in place while a run reads it",
           path_, st.st_size, mapping_bytes_);
}

void TokenFile::copy(std::int64_t start, std::int64_t n, std::int64_t* out) const {
  WF_CHECK(start >= 0 && n >= 0 && start <= count_ && n <= count_ - start,
           "token file '{}': tokens [{}, {}) are out of range [0, {})", path_, start, start + n, count_);
  check_not_shrunk();
  const unsigned char* p = tokens_ + start * token_bytes_;
  if (token_bytes_ == 2) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = get<std::uint16_t>(p + 2 * i);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = get<std::uint32_t>(p + 4 * i);
  }
}

}  // namespace wf::data
