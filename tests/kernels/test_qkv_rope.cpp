// The fused QKV split + RoPE (kernels/cpu/qkv_rope.h): bit for bit the split followed by rope() on q
// and k (what SelfAttention composed before), forward and backward; within kTolerance of the
// plain references (kernel_testing.h: f32 1e-5, f64 1e-12, only the final rounding differs); null
// gradients write zeros; the plain split (no rotation, odd head_dim allowed); errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/qkv_rope.h"
#include "kernels/cpu/rope.h"
#include "kernels/kernel_testing.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

// GQA G = 1, 2, 4, odd sizes, empty batches, and one above the threading threshold (32K elements).
const std::vector<QkvRopeShape> kShapes = {
    {1, 1, 1, 1, 2, true, 10000.0}, {2, 5, 3, 2, 8, true, 10000.0},  {2, 7, 2, 4, 6, true, 500000.0},
    {3, 3, 1, 1, 10, true, 100.0},  {2, 300, 2, 4, 16, true, 10000.0}, {0, 3, 2, 2, 4, true, 10000.0}};

std::int64_t projected_size(const QkvRopeShape& s) {
  return s.batch * s.tokens * s.groups * (s.group_size + 2) * s.head_dim;
}
std::int64_t q_size(const QkvRopeShape& s) { return s.batch * s.tokens * s.groups * s.group_size * s.head_dim; }
std::int64_t kv_size(const QkvRopeShape& s) { return s.batch * s.tokens * s.groups * s.head_dim; }

// Non-contiguous positions, far along (what a sequence-parallel rank or a packed row holds).
std::vector<std::int64_t> scattered_positions(std::int64_t tokens) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) p[t] = (t % 3 == 0) ? 5 * t : 30011 - 7 * t;
  return p;
}

// The composition the fused kernel replaces: projected's slots j = 0..G+1 of each group, copied
// out as narrow + reshape do (to_heads) or back (from_heads), with rope on q and k.
struct Split {
  std::vector<std::int64_t> slot;  // projected offset of each head, in q, k, v order
};
Split slots_of(const QkvRopeShape& s) {
  Split out;
  const std::int64_t G = s.group_size, rows = s.batch * s.tokens;
  for (std::int64_t which = 0; which < 3; ++which) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t g = 0; g < s.groups; ++g) {
        const std::int64_t first = which == 0 ? 0 : G + which - 1, count = which == 0 ? G : 1;
        for (std::int64_t j = first; j < first + count; ++j) out.slot.push_back(((r * s.groups + g) * (G + 2) + j) * s.head_dim);
      }
    }
  }
  return out;
}

template <class T>
struct Heads {
  std::vector<T> q, k, v;
};

template <class T>
Heads<T> composed_forward(const QkvRopeShape& s, const std::vector<T>& projected, const std::vector<std::int64_t>& pos) {
  Heads<T> h{std::vector<T>(q_size(s)), std::vector<T>(kv_size(s)), std::vector<T>(kv_size(s))};
  const Split split = slots_of(s);
  std::size_t head = 0;
  for (std::vector<T>* out : {&h.q, &h.k, &h.v}) {
    for (std::size_t e = 0; e < out->size(); e += s.head_dim, ++head) {
      std::copy_n(projected.begin() + split.slot[head], s.head_dim, out->begin() + e);
    }
  }
  if (s.rotate) {
    rope<T>({s.batch, s.tokens, s.groups * s.group_size, s.head_dim, s.theta}, h.q.data(), pos.data(), false, h.q.data());
    rope<T>({s.batch, s.tokens, s.groups, s.head_dim, s.theta}, h.k.data(), pos.data(), false, h.k.data());
  }
  return h;
}

template <class T>
std::vector<T> composed_backward(const QkvRopeShape& s, Heads<T> d, const std::vector<std::int64_t>& pos) {
  if (s.rotate) {
    rope<T>({s.batch, s.tokens, s.groups * s.group_size, s.head_dim, s.theta}, d.q.data(), pos.data(), true, d.q.data());
    rope<T>({s.batch, s.tokens, s.groups, s.head_dim, s.theta}, d.k.data(), pos.data(), true, d.k.data());
  }
  std::vector<T> out(projected_size(s));
  const Split split = slots_of(s);
  std::size_t head = 0;
  for (const std::vector<T>* in : {&d.q, &d.k, &d.v}) {
    for (std::size_t e = 0; e < in->size(); e += s.head_dim, ++head) {
      std::copy_n(in->begin() + e, s.head_dim, out.begin() + split.slot[head]);
    }
  }
  return out;
}

template <class T>
Heads<T> fused_forward(const QkvRopeShape& s, const std::vector<T>& projected, const std::vector<std::int64_t>& pos) {
  Heads<T> h{std::vector<T>(q_size(s)), std::vector<T>(kv_size(s)), std::vector<T>(kv_size(s))};
  qkv_rope_forward(s, projected.data(), pos.data(), h.q.data(), h.k.data(), h.v.data());
  return h;
}

}  // namespace

TEMPLATE_TEST_CASE("qkv_rope is bitwise the split then rope, forward and backward, and matches the references",
                   "[kernels][rope][qkv_rope]", float, double) {
  using T = TestType;
  ThreadCountGuard threads;
  std::uint64_t seed = 10;
  for (QkvRopeShape s : kShapes) {
    for (const bool rotate : {true, false}) {
      s.rotate = rotate;
      CAPTURE(s.batch, s.tokens, s.groups, s.group_size, s.head_dim, s.theta, s.rotate);
      const auto projected = randn<T>(projected_size(s), ++seed);
      const Heads<T> d{randn<T>(q_size(s), ++seed), randn<T>(kv_size(s), ++seed), randn<T>(kv_size(s), ++seed)};
      const auto pos = scattered_positions(s.tokens);
      for (const int t : {1, 2}) {
        wf::set_num_threads(t);
        const Heads<T> got = fused_forward(s, projected, pos), want = composed_forward(s, projected, pos);
        require_bitwise(got.q, want.q);
        require_bitwise(got.k, want.k);
        require_bitwise(got.v, want.v);
        Heads<T> ref{std::vector<T>(q_size(s)), std::vector<T>(kv_size(s)), std::vector<T>(kv_size(s))};
        qkv_rope_forward_reference(s, projected.data(), pos.data(), ref.q.data(), ref.k.data(), ref.v.data());
        CHECK(max_relative_error(got.q, ref.q) <= kTolerance<T>);
        CHECK(max_relative_error(got.k, ref.k) <= kTolerance<T>);
        REQUIRE(got.v == ref.v);  // v is copied, never rotated

        std::vector<T> d_projected(projected_size(s)), d_ref(projected_size(s));
        qkv_rope_backward(s, d.q.data(), d.k.data(), d.v.data(), pos.data(), d_projected.data());
        require_bitwise(d_projected, composed_backward(s, d, pos));
        qkv_rope_backward_reference(s, d.q.data(), d.k.data(), d.v.data(), pos.data(), d_ref.data());
        CHECK(max_relative_error(d_projected, d_ref) <= kTolerance<T>);

        // The backward is the transpose of an orthogonal map: it takes the forward's heads back.
        std::vector<T> back(projected_size(s));
        qkv_rope_backward(s, got.q.data(), got.k.data(), got.v.data(), pos.data(), back.data());
        CHECK(max_relative_error(back, projected) <= tolerance<T>(1e-5, 1e-13));
      }
    }
  }
}

TEST_CASE("qkv_rope: per-row positions are one row of batch·tokens tokens", "[kernels][rope][qkv_rope]") {
  // The op hands [B, T] positions over as batch 1, tokens B·T: each row rotated by its own.
  const QkvRopeShape rows{2, 4, 2, 2, 4, true, 10000.0}, flat{1, 8, 2, 2, 4, true, 10000.0};
  const auto projected = randn<double>(projected_size(rows), 3);
  const std::vector<std::int64_t> per_row{0, 1, 2, 3, 0, 1, 0, 1};
  const Heads<double> got = fused_forward(flat, projected, per_row);
  for (std::int64_t b = 0; b < 2; ++b) {
    const QkvRopeShape one{1, 4, 2, 2, 4, true, 10000.0};
    const std::int64_t n = projected_size(one);
    const std::vector<double> row(projected.begin() + b * n, projected.begin() + (b + 1) * n);
    const std::vector<std::int64_t> pos(per_row.begin() + b * 4, per_row.begin() + (b + 1) * 4);
    const Heads<double> want = composed_forward(one, row, pos);
    CHECK(std::vector<double>(got.q.begin() + b * q_size(one), got.q.begin() + (b + 1) * q_size(one)) == want.q);
    CHECK(std::vector<double>(got.k.begin() + b * kv_size(one), got.k.begin() + (b + 1) * kv_size(one)) == want.k);
  }
}

TEMPLATE_TEST_CASE("qkv_rope_backward: a null gradient writes zeros in its slots", "[kernels][rope][qkv_rope]", float,
                   double) {
  using T = TestType;
  const QkvRopeShape s{2, 3, 2, 2, 6, true, 10000.0};
  const auto pos = scattered_positions(s.tokens);
  const Heads<T> d{randn<T>(q_size(s), 21), randn<T>(kv_size(s), 22), randn<T>(kv_size(s), 23)};
  const Heads<T> zero{std::vector<T>(q_size(s)), std::vector<T>(kv_size(s)), std::vector<T>(kv_size(s))};
  for (int missing = 0; missing < 3; ++missing) {
    CAPTURE(missing);
    const T* dq = missing == 0 ? nullptr : d.q.data();
    const T* dk = missing == 1 ? nullptr : d.k.data();
    const T* dv = missing == 2 ? nullptr : d.v.data();
    // Garbage first: the kernel must write every element.
    std::vector<T> got(projected_size(s), std::numeric_limits<T>::quiet_NaN());
    qkv_rope_backward(s, dq, dk, dv, pos.data(), got.data());
    const Heads<T> with_zero{missing == 0 ? zero.q : d.q, missing == 1 ? zero.k : d.k, missing == 2 ? zero.v : d.v};
    // Equal values (rotating explicit zeros may give −0 where the kernel writes +0).
    CHECK(got == composed_backward(s, with_zero, pos));
  }
}

TEST_CASE("qkv_rope: the plain split takes an odd head_dim and no positions; bad shapes are errors",
          "[kernels][rope][qkv_rope]") {
  const QkvRopeShape plain{1, 2, 1, 2, 3, false, 10000.0};
  const auto projected = randn<float>(projected_size(plain), 5);
  Heads<float> h{std::vector<float>(q_size(plain)), std::vector<float>(kv_size(plain)), std::vector<float>(kv_size(plain))};
  qkv_rope_forward(plain, projected.data(), nullptr, h.q.data(), h.k.data(), h.v.data());
  const Heads<float> want = composed_forward(plain, projected, {});
  CHECK(h.q == want.q);
  CHECK(h.k == want.k);
  CHECK(h.v == want.v);

  const std::vector<std::int64_t> pos{0, 1};
  std::vector<float> out(64);
  CHECK_THROWS_WITH(qkv_rope_forward(QkvRopeShape{1, 2, 1, 2, 3, true, 10000.0}, projected.data(), pos.data(),
                                     out.data(), out.data(), out.data()),
                    Catch::Contains("head_dim 3 is odd"));
  CHECK_THROWS_WITH(qkv_rope_backward(QkvRopeShape{1, 2, 1, 0, 4, true, 10000.0}, out.data(), out.data(), out.data(),
                                      pos.data(), out.data()),
                    Catch::Contains("group_size (query heads per kv head) > 0"));
  CHECK_THROWS_WITH(qkv_rope_forward(QkvRopeShape{1, 2, 1, 1, 4, true, -1.0}, projected.data(), pos.data(),
                                     out.data(), out.data(), out.data()),
                    Catch::Contains("theta must be positive"));
}
