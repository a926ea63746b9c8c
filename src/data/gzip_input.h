#pragma once
// A data file read through zlib (internal): zlib decompresses gzip and passes anything else
// through as it is, so a reader takes both whatever the file's name. Shared by the IDX image
// reader and the document reader of `prepare-text`.
#include <zlib.h>

#include <cstdint>
#include <string>

namespace wf::data::detail {

// Owns the gzFile. Every failure is a wf::UserError that starts with `name` ("IDX images file
// 'PATH'", "document file 'PATH'") and, where a better file is the fix, ends with `how_to_fix`.
class GzipInput {
 public:
  // `noun` says what the file should be, for the message about a directory or a device ("an IDX
  // file"). Opens only regular files (a FIFO is refused, never waited on).
  GzipInput(std::string path, std::string name, std::string noun, std::string how_to_fix);
  ~GzipInput();
  GzipInput(const GzipInput&) = delete;
  GzipInput& operator=(const GzipInput&) = delete;

  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  // True once the first bytes showed a gzip stream (valid after the first read).
  bool gzipped() const;
  // Reads up to n bytes into out; fewer only where the data ends. A corrupt gzip stream or a
  // read error is a wf::UserError.
  std::int64_t read(void* out, std::int64_t n);
  // Whether the gzip stream ended in the middle (zlib reports "unexpected end of file").
  bool cut_short() const;
  // Bytes of the file on disk consumed so far (compressed bytes for gzip), for progress.
  std::int64_t offset_on_disk() const;

 private:
  int open_regular_file() const;
  [[noreturn]] void fail_stream() const;

  std::string path_, name_, noun_, how_to_fix_;
  gzFile file_ = nullptr;
};

}  // namespace wf::data::detail
