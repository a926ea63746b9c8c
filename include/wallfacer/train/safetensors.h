#pragma once
// Safetensors files: the tensor container PyTorch, JAX and Hugging Face read
// (https://github.com/huggingface/safetensors). Layout:
//
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | raw data
//
// The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}
// (byte offsets into the data section) and may hold "__metadata__": {string: string}. Data is
// little-endian, row-major, one tensor after the other without gaps. docs/checkpoints.md says why
// this format and how the checkpoint store uses it.
//
// This writer lists tensors in the header in StateDict order, and stores their data by element
// size, largest first, so that every tensor is aligned for its dtype (PyTorch's readers need it).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/nn/state_dict.h"

namespace wf::train {

// Writes `tensors` (CPU) and `metadata` to `path` atomically: a temporary
// file in the same directory, flushed to disk and renamed over the target. On failure (disk
// full, unwritable directory) a wf::Error names the path and the target is left as it was.
void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsContents {
  nn::StateDict tensors;  // CPU, in the order of the header
  std::map<std::string, std::string> metadata;
};

// Reads a safetensors file with dtypes F32, F64, BF16, F16, I32, I64, U8. wf::Error naming the
// file and the problem: missing, shorter than 8 bytes, header length beyond the file or above
// 100 MB, invalid JSON or JSON nested deeper than 128 levels, unknown dtype, shape inconsistent with the offsets, offsets beyond the file (truncated).
SafetensorsContents load_safetensors(const std::string& path);

// One tensor of a safetensors file as its header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t offset;  // of its first data byte in the file
  std::uint64_t bytes;
};

// A safetensors file opened to read parts of its tensors (the distributed checkpoints read only
// the element ranges a rank needs): the constructor parses and checks the header exactly as
// load_safetensors does, read() then preads byte ranges of one tensor's data.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in header order
  const SafetensorsEntry* find(std::string_view name) const;  // null when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // `size` bytes from `offset` bytes into `entry`'s data; wf::Error naming the file when it ends first.
  void read(const SafetensorsEntry& entry, std::uint64_t offset, std::uint64_t size, void* out) const;

 private:
  void parse_header();
  std::string path_;
  int fd_ = -1;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace wf::train
