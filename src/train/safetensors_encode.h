#pragma once
// The bytes of a safetensors file before they are written (internal): the checkpoint store
// hashes them on the way to disk instead of reading the file back.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/core/atomic_file.h"
#include "wallfacer/nn/state_dict.h"

namespace wf::train::detail {

struct SafetensorsImage {
  std::string prefix;            // u64 header length + padded JSON header
  std::vector<Tensor> tensors;   // data, in file order (holds the storage alive)
  // The file as byte ranges: the prefix, then each tensor's data. Valid while *this is unchanged.
  std::vector<wf::detail::ByteRange> pieces() const;
  std::uint64_t size() const;
};

// `path` only names the file in errors.
SafetensorsImage encode_safetensors(const nn::StateDict& tensors, const std::map<std::string, std::string>& metadata,
                                    const std::string& path);

}  // namespace wf::train::detail
