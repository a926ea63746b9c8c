#pragma once
// What rope and qkv_rope (kernels/cpu/rope.h, kernels/cpu/qkv_rope.h) share: the cos/sin table of
// the angles and the rotation of one head. One definition, so the fused QKV split rotates with
// exactly rope's bits (the op layer promises bit equality with the unfused composition).
#include <cstdint>
#include <vector>

namespace wf::kernels::cpu {

// cos a and ±sin a (− for the inverse rotation) of a = positions[t] · theta^(−2i/head_dim) per
// (token t, pair i < head_dim / 2), in double, shared by every batch row and head.
class RopeTable {
 public:
  RopeTable(std::int64_t tokens, std::int64_t head_dim, double theta, const std::int64_t* positions, bool inverse);
  std::int64_t half() const { return half_; }
  const double* cos_row(std::int64_t t) const { return cos_.data() + t * half_; }
  const double* sin_row(std::int64_t t) const { return sin_.data() + t * half_; }

 private:
  std::int64_t half_;
  std::vector<double> cos_, sin_;
};

// One head of width 2·half rotated by a table row (c, s): y[i] = lo·c − hi·s, y[i + half] =
// lo·s + hi·c with lo = x[i], hi = x[i + half], in double, rounded once to T. y may alias x: both
// channels of a pair are read before either is written.
template <typename T>
inline void rotate_head(const T* x, const double* c, const double* s, std::int64_t half, T* y) {
  for (std::int64_t i = 0; i < half; ++i) {
    const double lo = x[i], hi = x[i + half];
    y[i] = static_cast<T>(lo * c[i] - hi * s[i]);
    y[i + half] = static_cast<T>(lo * s[i] + hi * c[i]);
  }
}

}  // namespace wf::kernels::cpu
