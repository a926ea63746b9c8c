#pragma once
// Shared by the block-attention tests (test_parallel) and the sequence-parallel tests
// (test_dist): a global random attention problem with its naive f64 reference results
// (kernels/cpu/attention_reference.h), the relative error used for every comparison, and
// gathers/scatters along one dim by global positions (for lse [B, h, N], whose sequence dim is
// the last, which shard_sequence does not handle).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/cpu/attention_reference.h"
#include "wallfacer/core/tensor.h"

namespace wf::test {

// max|actual − reference| / max|reference| over the finite reference values. Equal values
// (also equal infinities: the −inf lse of a row that sees no key) count as exact; a NaN or a
// lone infinity gives infinity.
inline double relative_error(const Tensor& actual, const Tensor& reference) {
  if (actual.shape() != reference.shape()) return std::numeric_limits<double>::infinity();
  const std::vector<double> a = actual.to_vector<double>(), r = reference.to_vector<double>();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(r[i])) scale = std::max(scale, std::abs(r[i]));
    if (a[i] == r[i]) continue;
    const double d = std::abs(a[i] - r[i]);
    diff = std::max(diff, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return diff / std::max(scale, 1e-300);
}

namespace detail {
// Calls f(outer, n, inner) for t seen as [outer, n = shape[dim], inner].
template <class F>
void along_dim(const Shape& shape, std::size_t dim, F&& f) {
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < dim; ++i) outer *= shape[i];
  for (std::size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  f(outer, shape[dim], inner);
}
}  // namespace detail

// The slices of t at `positions` along `dim`, in that order (same dtype).
inline Tensor take_positions(const Tensor& t, std::size_t dim, const std::vector<std::int64_t>& positions) {
  Shape shape = t.shape();
  shape[dim] = static_cast<std::int64_t>(positions.size());
  const Tensor src = t.to(DType::f64);
  Tensor dst = Tensor::empty(shape, DType::f64);
  detail::along_dim(t.shape(), dim, [&](std::int64_t outer, std::int64_t n, std::int64_t inner) {
    const auto m = static_cast<std::int64_t>(positions.size());
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < m; ++i) {
        std::copy_n(src.data<double>() + (o * n + positions[static_cast<std::size_t>(i)]) * inner, inner,
                    dst.data<double>() + (o * m + i) * inner);
      }
    }
  });
  return dst.to(t.dtype());
}

// The inverse: writes the slices of `part` into `target` at `positions` along `dim`.
inline void put_positions(Tensor& target, std::size_t dim, const std::vector<std::int64_t>& positions,
                          const Tensor& part) {
  Tensor dst = target.to(DType::f64).clone();
  const Tensor src = part.to(DType::f64);
  detail::along_dim(target.shape(), dim, [&](std::int64_t outer, std::int64_t n, std::int64_t inner) {
    const auto m = static_cast<std::int64_t>(positions.size());
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < m; ++i) {
        std::copy_n(src.data<double>() + (o * m + i) * inner, inner,
                    dst.data<double>() + (o * n + positions[static_cast<std::size_t>(i)]) * inner);
      }
    }
  });
  target.copy_(dst);
}

struct AttentionDimsForTest {
  std::int64_t B = 1, N = 1, h = 1, h_kv = 1, d = 1;
};

// Global random inputs (Tensor::randn_at, so any process draws the same values) and the naive
// f64 reference of attention over the whole sequence, forward and backward, with the loss
// Σ d_o∘O + Σ d_lse∘lse (d_lse zero when `lse_grad` is false).
struct ReferenceAttention {
  Tensor q, k, v, d_o, d_lse;  // inputs, in the tested dtype
  Tensor o, lse, dq, dk, dv;   // reference results, f64
};

inline ReferenceAttention reference_attention(const AttentionDimsForTest& s, bool causal, DType dtype,
                                              std::uint64_t seed, bool lse_grad = true) {
  ReferenceAttention r;
  constexpr std::uint64_t kStream = 1'000'000'007;  // far apart: the tensors never share draws
  r.q = Tensor::randn_at({s.B, s.N, s.h, s.d}, seed, 0, dtype);
  r.k = Tensor::randn_at({s.B, s.N, s.h_kv, s.d}, seed, kStream, dtype);
  r.v = Tensor::randn_at({s.B, s.N, s.h_kv, s.d}, seed, 2 * kStream, dtype);
  r.d_o = Tensor::randn_at({s.B, s.N, s.h, s.d}, seed, 3 * kStream, dtype);
  r.d_lse = lse_grad ? Tensor::randn_at({s.B, s.h, s.N}, seed, 4 * kStream, dtype)
                     : Tensor::zeros({s.B, s.h, s.N}, dtype);
  kernels::cpu::AttentionShape shape;
  shape.batch = s.B;
  shape.q_len = shape.kv_len = s.N;
  shape.heads = s.h;
  shape.kv_heads = s.h_kv;
  shape.head_dim = s.d;
  shape.causal = causal;
  r.o = Tensor::empty(r.q.shape(), DType::f64);
  r.lse = Tensor::empty(r.d_lse.shape(), DType::f64);
  r.dq = Tensor::empty(r.q.shape(), DType::f64);
  r.dk = Tensor::empty(r.k.shape(), DType::f64);
  r.dv = Tensor::empty(r.k.shape(), DType::f64);
  dispatch_float(dtype, "reference_attention", [&](auto tag) {
    using T = decltype(tag);
    kernels::cpu::attention_forward_reference<T>(shape, r.q.data<T>(), r.k.data<T>(), r.v.data<T>(), r.o.data<double>(),
                                                 r.lse.data<double>());
    kernels::cpu::attention_backward_reference<T>(shape, r.q.data<T>(), r.k.data<T>(), r.v.data<T>(), r.d_o.data<T>(),
                                                  r.dq.data<double>(), r.dk.data<double>(), r.dv.data<double>(),
                                                  r.d_lse.data<T>());
  });
  return r;
}

// Visible (query, key) pairs of packed documents (one list per batch row or one shared), summed
// over the lists: the work attention with these boundaries must count.
inline std::int64_t document_pairs(const std::vector<std::vector<std::int64_t>>& bounds, bool causal) {
  std::int64_t pairs = 0;
  for (const auto& b : bounds) {
    for (std::size_t i = 0; i + 1 < b.size(); ++i) {
      const std::int64_t n = b[i + 1] - b[i];
      pairs += causal ? n * (n + 1) / 2 : n * n;
    }
  }
  return pairs;
}

// Packed documents: replaces r's reference results (o, lse, dq, dk, dv, f64) by those of every
// document of every batch row run alone through the naive reference (causal inside it when
// `causal`): what attention with AttentionOptions::doc_bounds = `bounds` (one list per row, or one
// shared) must give. Keys of other documents never take part, so nothing crosses a boundary.
inline void reference_attention_documents(ReferenceAttention& r, bool causal,
                                          const std::vector<std::vector<std::int64_t>>& bounds, double scale = 0) {
  const Tensor q = r.q.to(DType::f64), k = r.k.to(DType::f64), v = r.v.to(DType::f64);
  const Tensor d_o = r.d_o.to(DType::f64), d_lse = r.d_lse.to(DType::f64);
  for (std::int64_t b = 0; b < q.size(0); ++b) {
    const std::vector<std::int64_t>& list = bounds[bounds.size() == 1 ? 0 : static_cast<std::size_t>(b)];
    for (std::size_t i = 0; i + 1 < list.size(); ++i) {
      std::vector<std::int64_t> doc;
      for (std::int64_t p = list[i]; p < list[i + 1]; ++p) doc.push_back(p);
      const auto row = [&](const Tensor& t, std::size_t dim) { return take_positions(t.slice0(b, b + 1), dim, doc); };
      const Tensor qd = row(q, 1), kd = row(k, 1), vd = row(v, 1), dod = row(d_o, 1), dlsed = row(d_lse, 2);
      kernels::cpu::AttentionShape s;
      s.q_len = s.kv_len = static_cast<std::int64_t>(doc.size());
      s.heads = q.size(2);
      s.kv_heads = k.size(2);
      s.head_dim = q.size(3);
      s.causal = causal;
      s.scale = scale;
      Tensor o = Tensor::empty(qd.shape(), DType::f64), lse = Tensor::empty(dlsed.shape(), DType::f64);
      Tensor dq = Tensor::empty(qd.shape(), DType::f64), dk = Tensor::empty(kd.shape(), DType::f64);
      Tensor dv = Tensor::empty(kd.shape(), DType::f64);
      kernels::cpu::attention_forward_reference<double>(s, qd.data<double>(), kd.data<double>(), vd.data<double>(),
                                                        o.data<double>(), lse.data<double>());
      kernels::cpu::attention_backward_reference<double>(s, qd.data<double>(), kd.data<double>(), vd.data<double>(),
                                                         dod.data<double>(), dq.data<double>(), dk.data<double>(),
                                                         dv.data<double>(), dlsed.data<double>());
      for (auto [target, dim, part] : {std::tuple{&r.o, 1, &o}, {&r.lse, 2, &lse}, {&r.dq, 1, &dq}, {&r.dk, 1, &dk},
                                       {&r.dv, 1, &dv}}) {
        Tensor rows = target->slice0(b, b + 1);
        put_positions(rows, static_cast<std::size_t>(dim), doc, *part);
      }
    }
  }
}

}  // namespace wf::test
