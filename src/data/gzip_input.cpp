// GzipInput (gzip_input.h): zlib's gzread behind wf::UserErrors that name the file.
#include "src/data/gzip_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "src/core/atomic_file.h"
#include "wallfacer/core/error.h"

namespace wf::data::detail {
namespace {

constexpr int kGzipBufferBytes = 1 << 17;  // zlib's default 8 KiB makes many small reads

}  // namespace

GzipInput::GzipInput(std::string path, std::string name, std::string noun, std::string how_to_fix)
    : path_(std::move(path)), name_(std::move(name)), noun_(std::move(noun)), how_to_fix_(std::move(how_to_fix)) {
  const int fd = open_regular_file();
  file_ = ::gzdopen(fd, "rb");
  if (file_ == nullptr) {
    ::close(fd);
    WF_FAIL("{}: zlib cannot open it (out of memory)", name_);
  }
  ::gzbuffer(file_, kGzipBufferBytes);
}

GzipInput::~GzipInput() { ::gzclose(file_); }

bool GzipInput::gzipped() const { return ::gzdirect(file_) == 0; }

std::int64_t GzipInput::read(void* out, std::int64_t n) {
  auto* bytes = static_cast<unsigned char*>(out);
  std::int64_t done = 0;
  while (done < n) {
    // gzread takes an unsigned int and returns an int: at most INT_MAX bytes a call.
    const auto want = static_cast<unsigned>(std::min<std::int64_t>(n - done, INT_MAX));
    const int got = ::gzread(file_, bytes + done, want);
    if (got < 0) fail_stream();
    if (got == 0) break;
    done += got;
  }
  return done;
}

bool GzipInput::cut_short() const {
  int code = Z_OK;
  ::gzerror(file_, &code);
  return code == Z_BUF_ERROR;
}

std::int64_t GzipInput::offset_on_disk() const { return static_cast<std::int64_t>(::gzoffset(file_)); }

// O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a regular file is refused.
int GzipInput::open_regular_file() const {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  WF_USER_CHECK(fd >= 0, "{}: cannot open it: {}; {}", name_, wf::detail::errno_text(), how_to_fix_);
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (stat_ok && S_ISREG(st.st_mode)) return fd;
  const std::string reason = stat_ok ? "" : wf::detail::errno_text();
  ::close(fd);
  WF_USER_CHECK(stat_ok, "{}: cannot stat it: {}", name_, reason);
  WF_USER_FAIL("{} is {}, not {}; {}", name_,
               S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (a device, pipe or socket)", noun_,
               how_to_fix_);
}

void GzipInput::fail_stream() const {
  int code = Z_OK;
  std::string reason = ::gzerror(file_, &code);
  // zlib prefixes its message with the file's name, which for gzdopen is "<fd:N>".
  if (reason.rfind("<fd:", 0) == 0 && reason.find(": ") != std::string::npos) reason.erase(0, reason.find(": ") + 2);
  // Z_ERRNO: the system refused the read (zlib's message is strerror's).
  if (code == Z_ERRNO) WF_USER_FAIL("{}: cannot read it: {}", name_, reason);
  WF_USER_FAIL("{} is a corrupt gzip stream ({}); {}", name_, reason, how_to_fix_);
}

}  // namespace wf::data::detail
