#include "kernels/cpu/qkv_rope.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/rope_table.h"

namespace wf::kernels::cpu {
namespace {

// Where slot j of kv group g on row r (j < G: query head j; j = G: the key head; j = G + 1: the
// value head) lives among q, k and v; null when that tensor is (a gradient not needed).
template <class P>
P split_head(const QkvRopeShape& s, std::int64_t r, std::int64_t g, std::int64_t j, P q, P k, P v) {
  const std::int64_t group = r * s.groups + g;
  if (j < s.group_size) return q != nullptr ? q + (group * s.group_size + j) * s.head_dim : nullptr;
  P base = j == s.group_size ? k : v;
  return base != nullptr ? base + group * s.head_dim : nullptr;
}

// Calls body(r, g, j, slot, rotate, cos, sin) for every head of every row: slot is the head's
// offset in projected, rotate whether it turns (q and k when rotating; cos/sin its token's table
// row, null otherwise). The caller moves the head in its own direction.
template <class Body>
void for_each_head(const QkvRopeShape& s, const std::int64_t* positions, bool inverse, Body body) {
  std::optional<RopeTable> table;
  if (s.rotate) table.emplace(s.tokens, s.head_dim, s.theta, positions, inverse);
  const std::int64_t slots = s.group_size + 2;
  parallel_for_rows(s.batch * s.tokens, s.groups * slots * s.head_dim, [&](std::int64_t r) {
    const double* c = table ? table->cos_row(r % s.tokens) : nullptr;
    const double* sn = table ? table->sin_row(r % s.tokens) : nullptr;
    for (std::int64_t g = 0; g < s.groups; ++g) {
      for (std::int64_t j = 0; j < slots; ++j) {
        // q and k (j <= G) turn; v never does.
        body(r, g, j, ((r * s.groups + g) * slots + j) * s.head_dim, table && j <= s.group_size, c, sn);
      }
    }
  });
}

}  // namespace

template <typename T>
void qkv_rope_forward(const QkvRopeShape& s, const T* projected, const std::int64_t* positions, T* q, T* k, T* v) {
  check_qkv_rope_shape(s, "qkv_rope_forward");
  const std::int64_t hd = s.head_dim;
  for_each_head(s, positions, /*inverse=*/false,
                [&](std::int64_t r, std::int64_t g, std::int64_t j, std::int64_t slot, bool rotate, const double* c,
                    const double* sn) {
                  T* out = split_head(s, r, g, j, q, k, v);
                  if (rotate) {
                    rotate_head(projected + slot, c, sn, hd / 2, out);
                  } else {
                    std::copy(projected + slot, projected + slot + hd, out);
                  }
                });
}

template <typename T>
void qkv_rope_backward(const QkvRopeShape& s, const T* dq, const T* dk, const T* dv, const std::int64_t* positions,
                       T* d_projected) {
  check_qkv_rope_shape(s, "qkv_rope_backward");
  const std::int64_t hd = s.head_dim;
  for_each_head(s, positions, /*inverse=*/true,
                [&](std::int64_t r, std::int64_t g, std::int64_t j, std::int64_t slot, bool rotate, const double* c,
                    const double* sn) {
                  const T* grad = split_head(s, r, g, j, dq, dk, dv);
                  T* out = d_projected + slot;
                  if (grad == nullptr) {
                    std::fill(out, out + hd, T(0));
                  } else if (rotate) {
                    rotate_head(grad, c, sn, hd / 2, out);
                  } else {
                    std::copy(grad, grad + hd, out);
                  }
                });
}

namespace {

// One element of the reference: channel ch of a head read through `at` (rotated by `sign`·angle
// when `rotate`), straight from rope.h's formula.
template <class At>
double reference_channel(const QkvRopeShape& s, std::int64_t position, bool rotate, double sign, std::int64_t ch,
                         At at) {
  if (!rotate) return at(ch);
  const std::int64_t half = s.head_dim / 2, i = ch % half;
  const double a = sign * static_cast<double>(position) *
                   std::pow(s.theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
  const double lo = at(i), hi = at(i + half);
  return ch < half ? lo * std::cos(a) - hi * std::sin(a) : lo * std::sin(a) + hi * std::cos(a);
}

// Calls f(projected index, which (0 q, 1 k, 2 v), index in that tensor, token) for every element,
// from the shapes alone.
template <class F>
void reference_walk(const QkvRopeShape& s, F f) {
  const std::int64_t G = s.group_size, hd = s.head_dim, rows = s.batch * s.tokens;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t g = 0; g < s.groups; ++g) {
      for (std::int64_t j = 0; j < G + 2; ++j) {
        const std::int64_t base = ((r * s.groups + g) * (G + 2) + j) * hd;
        const int which = j < G ? 0 : (j == G ? 1 : 2);
        const std::int64_t head = which == 0 ? (r * s.groups + g) * G + j : r * s.groups + g;
        f(base, which, head * hd, r % s.tokens);
      }
    }
  }
}

}  // namespace

template <typename T>
void qkv_rope_forward_reference(const QkvRopeShape& s, const T* projected, const std::int64_t* positions, T* q, T* k,
                                T* v) {
  check_qkv_rope_shape(s, "qkv_rope_forward_reference");
  T* outs[3] = {q, k, v};
  reference_walk(s, [&](std::int64_t base, int which, std::int64_t head, std::int64_t t) {
    const bool rotate = s.rotate && which < 2;
    const std::int64_t position = s.rotate ? positions[t] : 0;
    for (std::int64_t ch = 0; ch < s.head_dim; ++ch) {
      outs[which][head + ch] = static_cast<T>(reference_channel(
          s, position, rotate, 1.0, ch, [&](std::int64_t c) { return static_cast<double>(projected[base + c]); }));
    }
  });
}

template <typename T>
void qkv_rope_backward_reference(const QkvRopeShape& s, const T* dq, const T* dk, const T* dv,
                                 const std::int64_t* positions, T* d_projected) {
  check_qkv_rope_shape(s, "qkv_rope_backward_reference");
  const T* grads[3] = {dq, dk, dv};
  reference_walk(s, [&](std::int64_t base, int which, std::int64_t head, std::int64_t t) {
    const bool rotate = s.rotate && which < 2;
    const std::int64_t position = s.rotate ? positions[t] : 0;
    const T* grad = grads[which];
    for (std::int64_t ch = 0; ch < s.head_dim; ++ch) {
      d_projected[base + ch] =
          grad == nullptr ? T(0)
                          : static_cast<T>(reference_channel(s, position, rotate, -1.0, ch, [&](std::int64_t c) {
                              return static_cast<double>(grad[head + c]);
                            }));
    }
  });
}

#define WF_INSTANTIATE_QKV_ROPE(T)                                                                                 \
  template void qkv_rope_forward<T>(const QkvRopeShape&, const T*, const std::int64_t*, T*, T*, T*);             \
  template void qkv_rope_backward<T>(const QkvRopeShape&, const T*, const T*, const T*, const std::int64_t*, T*); \
  template void qkv_rope_forward_reference<T>(const QkvRopeShape&, const T*, const std::int64_t*, T*, T*, T*);   \
  template void qkv_rope_backward_reference<T>(const QkvRopeShape&, const T*, const T*, const T*,                \
                                               const std::int64_t*, T*);
WF_INSTANTIATE_QKV_ROPE(float)
WF_INSTANTIATE_QKV_ROPE(double)
#undef WF_INSTANTIATE_QKV_ROPE

}  // namespace wf::kernels::cpu
