#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/rope_table.h"
#include "kernels/rope_frequencies.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

RopeTable::RopeTable(std::int64_t tokens, std::int64_t head_dim, double theta, const std::int64_t* positions,
                     bool inverse)
    : half_(head_dim / 2), cos_(static_cast<std::size_t>(tokens * half_)), sin_(cos_.size()) {
  const std::vector<double> inv_freq = rope_inverse_frequencies(head_dim, theta);
  const double sign = inverse ? -1.0 : 1.0;
  parallel_for_rows(tokens, half_, [&](std::int64_t t) {
    for (std::int64_t i = 0; i < half_; ++i) {
      const double a = static_cast<double>(positions[t]) * inv_freq[i];
      cos_[t * half_ + i] = std::cos(a);
      sin_[t * half_ + i] = sign * std::sin(a);
    }
  });
}

template <typename T>
void rope(const RopeShape& s, const T* x, const std::int64_t* positions, bool inverse, T* y) {
  check_rope_shape(s, "rope");
  const std::int64_t row = s.heads * s.head_dim;
  const RopeTable table(s.tokens, s.head_dim, s.theta, positions, inverse);
  parallel_for_rows(s.batch * s.tokens, row, [&](std::int64_t r) {
    const double* c = table.cos_row(r % s.tokens);
    const double* sn = table.sin_row(r % s.tokens);
    for (std::int64_t h = 0; h < s.heads; ++h) {
      rotate_head(x + r * row + h * s.head_dim, c, sn, table.half(), y + r * row + h * s.head_dim);
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
