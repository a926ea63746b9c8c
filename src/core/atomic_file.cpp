#include "src/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "wallfacer/core/error.h"

namespace wf::detail {

std::string errno_text() { return std::strerror(errno); }

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  namespace fs = std::filesystem;
  const fs::path target(path_);
  dir_ = (target.has_parent_path() ? target.parent_path() : fs::path(".")).string();
  // fmt, not operator+: g++ 12 warns (-Wrestrict, a false positive) on "." + std::string here.
  tmp_path_ = (fs::path(dir_) / fmt::format(".{}.tmp.XXXXXX", target.filename().string())).string();
  fd_ = ::mkstemp(tmp_path_.data());
  WF_CHECK(fd_ >= 0, "{}: cannot write '{}': cannot create a temporary file in '{}': {}", what_, path_, dir_,
           errno_text());
  // mkstemp creates the file private (0600); these files are ordinary data.
  if (::fchmod(fd_, 0644) != 0) {
    const std::string reason = errno_text();
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    WF_FAIL("{}: cannot write '{}': cannot set the permissions of '{}': {}", what_, path_, tmp_path_, reason);
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  WF_CHECK(!committed_, "{}: '{}' was already committed", what_, path_);
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    WF_CHECK(written > 0, "{}: cannot write '{}' (temporary '{}'): {}", what_, path_, tmp_path_, errno_text());
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit() {
  WF_CHECK(::fsync(fd_) == 0, "{}: cannot write '{}': cannot flush '{}' to disk: {}", what_, path_, tmp_path_,
           errno_text());
  const int fd = fd_;
  fd_ = -1;
  WF_CHECK(::close(fd) == 0, "{}: cannot write '{}': cannot close '{}': {}", what_, path_, tmp_path_, errno_text());
  WF_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "{}: cannot write '{}': cannot rename the temporary '{}' "
           "onto it: {}", what_, path_, tmp_path_, errno_text());
  committed_ = true;
  // The directory entry of a rename is only durable once the directory itself is synced.
  fsync_directory(dir_);
}

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces, const std::string& what) {
  AtomicFile file(path, what);
  for (const ByteRange& piece : pieces) file.write(piece.data, piece.size);
  file.commit();
}

}  // namespace wf::detail
