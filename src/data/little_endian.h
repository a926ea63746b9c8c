#pragma once
// Fixed-width fields of the data files (token files, document indexes; internal): read and
// written with memcpy in host order, which is the files' order only on a little-endian host.
#include <bit>
#include <cstring>

namespace wf::data::detail {

static_assert(std::endian::native == std::endian::little, "wallfacer's data files assume a little-endian host");

template <typename T>
void put(unsigned char* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}

template <typename T>
T get(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

}  // namespace wf::data::detail
