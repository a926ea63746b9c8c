#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

// theta^(−2i/d): the frequency of pair i.
double inverse_frequency(const RopeShape& s, std::int64_t i) {
  return std::pow(s.theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
}

}  // namespace


template <typename T>
void rope(const RopeShape& s, const T* x, const std::int64_t* positions, bool inverse, T* y) {
  check_rope_shape(s, "rope");
  const std::int64_t half = s.head_dim / 2, row = s.heads * s.head_dim;
  // cos/sin per (token, pair), shared by every batch row and head.
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) inv_freq[i] = inverse_frequency(s, i);
  std::vector<double> cos_table(static_cast<std::size_t>(s.tokens * half));
  std::vector<double> sin_table(cos_table.size());
  const double sign = inverse ? -1.0 : 1.0;
  parallel_for_rows(s.tokens, half, [&](std::int64_t t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(positions[t]) * inv_freq[i];
      cos_table[t * half + i] = std::cos(a);
      sin_table[t * half + i] = sign * std::sin(a);
    }
  });
  parallel_for_rows(s.batch * s.tokens, row, [&](std::int64_t r) {
    const double* c = cos_table.data() + (r % s.tokens) * half;
    const double* sn = sin_table.data() + (r % s.tokens) * half;
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const T* xh = x + r * row + h * s.head_dim;
      T* yh = y + r * row + h * s.head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const double lo = xh[i], hi = xh[i + half];
        yh[i] = static_cast<T>(lo * c[i] - hi * sn[i]);
        yh[i + half] = static_cast<T>(lo * sn[i] + hi * c[i]);
      }
    }
  });
}

template <typename T>
void rope_reference(const RopeShape& s, const T* x, const std::int64_t* positions, bool inverse, T* y) {
  check_rope_shape(s, "rope_reference");
  const std::int64_t half = s.head_dim / 2;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const std::int64_t base = ((b * s.tokens + t) * s.heads + h) * s.head_dim;
        for (std::int64_t i = 0; i < half; ++i) {
          const double a = (inverse ? -1.0 : 1.0) * static_cast<double>(positions[t]) *
                           std::pow(s.theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
          const double lo = x[base + i], hi = x[base + i + half];
          y[base + i] = static_cast<T>(lo * std::cos(a) - hi * std::sin(a));
          y[base + i + half] = static_cast<T>(lo * std::sin(a) + hi * std::cos(a));
        }
      }
    }
  }
}

#define WF_INSTANTIATE_ROPE(T)                                                             \
  template void rope<T>(const RopeShape&, const T*, const std::int64_t*, bool, T*);        \
  template void rope_reference<T>(const RopeShape&, const T*, const std::int64_t*, bool, T*);
WF_INSTANTIATE_ROPE(float)
WF_INSTANTIATE_ROPE(double)
#undef WF_INSTANTIATE_ROPE

}  // namespace wf::kernels::cpu
