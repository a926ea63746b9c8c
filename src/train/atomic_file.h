#pragma once
// Crash-safe file writes for checkpoints (internal). A file is written under a temporary name
// in its own directory, flushed to disk, then renamed over the target, so a reader sees either
// the old file or the complete new one, never a prefix.
#include <cstddef>
#include <string>
#include <vector>

namespace wf::train::detail {

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Writes the concatenation of `pieces` to `path` atomically. wf::Error naming `path` (and the
// system's reason) on any failure; the target is then untouched and no temporary is left.
void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces);

// Makes renames and creations inside `dir` durable. Best effort: the data is already synced.
void fsync_directory(const std::string& dir);

// The system's message for the current errno.
std::string errno_text();

}  // namespace wf::train::detail
