#pragma once
// Philox-4x32-10 and the uniform draw of element `index` of a stream, for device and host alike:
// wf::philox4x32 and wf::uniform_at (src/core/rng.cpp) are these functions, and the CUDA dropout
// calls them in its kernel, so it keeps exactly the elements the CPU keeps. Free of fmt (nvcc
// reads it).
#include <cstdint>

#include "src/core/host_device.h"

namespace wf::detail {

struct PhiloxBlock {
  std::uint32_t word[4];
};

// One block: four 32-bit words for a 64-bit key and a 128-bit counter (wf::philox4x32).
WF_HOST_DEVICE PhiloxBlock philox4x32_10(std::uint64_t key, std::uint64_t counter_lo, std::uint64_t counter_hi = 0) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Element `index` of stream `seed`, uniform in [0, 1): 53 bits of block `index`'s first two
// words, exactly as wf::uniform_at (the integer below 2^53 converts to double exactly).
WF_HOST_DEVICE double philox_uniform(std::uint64_t seed, std::uint64_t index) {
  const PhiloxBlock w = philox4x32_10(seed, index);
  const std::uint64_t bits = (static_cast<std::uint64_t>(w.word[0]) << 21) ^ (w.word[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * 0x1.0p-53;
}

}  // namespace wf::detail
