#pragma once
// SHA-256 (FIPS 180-4), the checksum of checkpoint files. Internal: small and dependency-free;
// speed is secondary (a few hundred MB/s), checkpoints are hashed once per save and load.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace wf::train::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex digits. Ends the computation: call once.
  std::string hex_digest();

 private:
  void compress(const unsigned char* block);
  std::array<std::uint32_t, 8> state_;
  std::array<unsigned char, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// Streams the file; wf::Error naming it when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace wf::train::detail
