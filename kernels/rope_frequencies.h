#pragma once
// RoPE's frequency per channel pair, theta^(−2i/head_dim) for i < head_dim / 2, in double: the one
// formula every backend's table starts from (the CPU's kernels/cpu/rope_table.h, the CUDA entries'
// host table in kernels/cuda/embedding.cpp), so their angles, position · frequency, agree bit for bit.
// (The plain references in kernels/cpu/rope.cpp and kernels/cpu/qkv_rope.cpp keep their own copy of
// the formula on purpose: a reference is checked against the kernels, not built from them.)
#include <cmath>
#include <cstdint>
#include <vector>

namespace wf::kernels {

inline std::vector<double> rope_inverse_frequencies(std::int64_t head_dim, double theta) {
  std::vector<double> inv_freq(static_cast<std::size_t>(head_dim / 2));
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  return inv_freq;
}

}  // namespace wf::kernels
