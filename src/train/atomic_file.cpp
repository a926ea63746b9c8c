#include "src/train/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "wallfacer/core/error.h"

namespace wf::train::detail {

std::string errno_text() { return std::strerror(errno); }

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp_path = (dir / fmt::format(".{}.tmp.XXXXXX", target.filename().string())).string();
  const int fd = ::mkstemp(tmp_path.data());
  WF_CHECK(fd >= 0, "cannot write '{}': cannot create a temporary file in '{}': {}", path, dir.string(), errno_text());
  try {
    // mkstemp creates the file private (0600); a checkpoint is ordinary data.
    WF_CHECK(::fchmod(fd, 0644) == 0, "cannot write '{}': cannot set the permissions of '{}': {}", path, tmp_path,
             errno_text());
    for (const ByteRange& piece : pieces) {
      const auto* bytes = static_cast<const unsigned char*>(piece.data);
      std::size_t left = piece.size;
      while (left > 0) {
        const ssize_t written = ::write(fd, bytes, left);
        if (written < 0 && errno == EINTR) continue;
        WF_CHECK(written > 0, "cannot write '{}' (temporary '{}'): {}", path, tmp_path, errno_text());
        bytes += written;
        left -= static_cast<std::size_t>(written);
      }
    }
    WF_CHECK(::fsync(fd) == 0, "cannot write '{}': cannot flush '{}' to disk: {}", path, tmp_path, errno_text());
    const int closed = ::close(fd);
    WF_CHECK(closed == 0, "cannot write '{}': cannot close '{}': {}", path, tmp_path, errno_text());
  } catch (...) {
    ::close(fd);  // harmless EBADF when the failure came after the close
    ::unlink(tmp_path.c_str());
    throw;
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(tmp_path.c_str());
    WF_FAIL("cannot write '{}': cannot rename the temporary '{}' onto it: {}", path, tmp_path, reason);
  }
  fsync_directory(dir.string());
}

}  // namespace wf::train::detail
