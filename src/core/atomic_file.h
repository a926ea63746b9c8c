#pragma once
// Crash-safe file writes (internal): token files, safetensors and checkpoint manifests. A file
// is written under a temporary name in its own directory, flushed to disk, then renamed over
// the target, so a reader (or a run resumed after a crash) sees either the old file or the
// complete new one, never a prefix.
#include <cstddef>
#include <string>
#include <vector>

namespace wf::detail {

// Streams bytes into a temporary file next to `path`; commit() syncs it and renames it onto
// `path`. Destroyed without commit() (an exception on the way), it removes the temporary and
// leaves `path` untouched. Errors are wf::Error naming `what` (the caller, e.g.
// "write_token_file"), the target and the system's reason.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void commit();

 private:
  std::string path_, what_, tmp_path_, dir_;
  int fd_ = -1;
  bool committed_ = false;
};

struct ByteRange {
  const void* data;
  std::size_t size;
};
// The concatenation of `pieces`, written with AtomicFile.
void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces, const std::string& what);

// Makes renames and creations inside `dir` durable. Best effort: the data is already synced.
void fsync_directory(const std::string& dir);

// The system's message for the current errno.
std::string errno_text();

}  // namespace wf::detail
