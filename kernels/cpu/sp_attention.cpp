// CPU kernels of sequence-parallel attention and their references (sp_attention.h). The
// kernels keep the arithmetic src/parallel did before they moved here (types and order), so
// every strategy's results are the same bits as then.
#include "kernels/cpu/sp_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

// ---- WallFacer's team combine -----------------------------------------------------------------

template <class T>
void team_lse_combine(int members, std::int64_t rows, int member, const T* all, T* lse_star, T* weight) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    T hi = kNegInf;
    for (int c = 0; c < members; ++c) hi = std::max(hi, all[c * rows + r]);
    if (hi == kNegInf) {
      lse_star[r] = kNegInf;
      weight[r] = T(0);
      continue;
    }
    T sum = 0;
    for (int c = 0; c < members; ++c) sum += std::exp(all[c * rows + r] - hi);
    lse_star[r] = hi + std::log(sum);
    weight[r] = std::exp(all[member * rows + r] - lse_star[r]);
  }
}

template <class T>
void team_lse_combine_reference(int members, std::int64_t rows, int member, const T* all, double* lse_star,
                                double* weight) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    double hi = kNegInf;
    for (int c = 0; c < members; ++c) hi = std::max(hi, double(all[c * rows + r]));
    double sum = 0;
    for (int c = 0; c < members; ++c) {
      if (hi != kNegInf) sum += std::exp(double(all[c * rows + r]) - hi);
    }
    lse_star[r] = hi == kNegInf ? kNegInf : hi + std::log(sum);
    weight[r] = hi == kNegInf ? 0.0 : std::exp(double(all[member * rows + r]) - lse_star[r]);
  }
}

template <class T>
void scale_attention_rows(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, T* o, const T* weight) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t head = 0; head < h; ++head) {
        const T w = weight[(b * h + head) * n + i];
        T* row = o + ((b * n + i) * h + head) * d;
        for (std::int64_t e = 0; e < d; ++e) row[e] *= w;
      }
    }
  }
}

template <class T>
void scale_attention_rows_reference(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* o,
                                    const T* weight, double* out) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t head = 0; head < h; ++head) {
        for (std::int64_t e = 0; e < d; ++e) {
          const std::int64_t at = ((b * n + i) * h + head) * d + e;
          out[at] = double(o[at]) * double(weight[(b * h + head) * n + i]);
        }
      }
    }
  }
}

// ---- the backward's D ---------------------------------------------------------------------------

template <class T>
void attention_minus_delta(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* d_o, const T* o,
                           const T* d_lse, T* out) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t head = 0; head < h; ++head) {
        const std::int64_t row = ((b * n + i) * h + head) * d, at = (b * h + head) * n + i;
        T dot = 0;
        for (std::int64_t e = 0; e < d; ++e) dot += d_o[row + e] * o[row + e];
        out[at] = (d_lse ? d_lse[at] : T(0)) - dot;
      }
    }
  }
}

template <class T>
void attention_minus_delta_reference(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, const T* d_o,
                                     const T* o, const T* d_lse, double* out) {
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t head = 0; head < h; ++head) {
      for (std::int64_t i = 0; i < n; ++i) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e) {
          const std::int64_t at = ((b * n + i) * h + head) * d + e;
          dot += double(d_o[at]) * double(o[at]);
        }
        const std::int64_t at = (b * h + head) * n + i;
        out[at] = (d_lse != nullptr ? double(d_lse[at]) : 0.0) - dot;
      }
    }
  }
}

// ---- the Ulysses message ------------------------------------------------------------------------

namespace {

// One element from storage type From to To: exact for widening, round to nearest even for
// narrowing (f32 → bf16 directly; anything else through double, correctly rounded).
template <class To, class From>
To convert(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (std::is_same_v<From, bf16> && std::is_same_v<To, float>) return bf16_to_float(x);
  else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bf16>) return float_to_bf16(x);
  else return from_double<To>(to_double(x));
}

// A run of n elements into the message (rounded to the wire type W) and out of it (widened to
// the tensor's E, written or added). An element of the message may sit at any byte: it is read
// and written with memcpy, never through a W*.
template <class W, class E>
void pack_run(const E* from, std::int64_t n, std::byte* to) {
  if constexpr (std::is_same_v<W, E>) {
    std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(W));
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      const W w = convert<W>(from[c]);
      std::memcpy(to + static_cast<std::size_t>(c) * sizeof(W), &w, sizeof w);
    }
  }
}
template <class W, class E>
void unpack_run(const std::byte* from, std::int64_t n, E* to, bool add) {
  if constexpr (std::is_same_v<W, E>) {
    if (!add) {
      std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(W));
      return;
    }
  }
  for (std::int64_t c = 0; c < n; ++c) {
    W w;
    std::memcpy(&w, from + static_cast<std::size_t>(c) * sizeof(W), sizeof w);
    if (!add) {
      to[c] = convert<E>(w);
    } else if constexpr (std::is_floating_point_v<E>) {
      to[c] += convert<E>(w);
    } else {
      WF_FAIL("ulysses_block: a sum over kv-head sharers needs an f32 or f64 tensor, got {}", dtype_name(dtype_v<E>));
    }
  }
}

template <class W, class E>
void walk_block(const UlyssesBlock& k, E* base, std::byte* block) {
  const auto n = static_cast<std::int64_t>(k.rows.size());
  for (std::int64_t b = 0; b < k.batch; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t token = k.rows[static_cast<std::size_t>(i)];
      for (std::int64_t hh = 0; hh < k.block_heads; ++hh) {
        E* element = base + k.element(b, token, k.first_head + hh);
        if (k.move == BlockMove::pack) {
          pack_run<W>(element, k.width, block);
        } else {
          unpack_run<W>(block, k.width, element, k.move == BlockMove::unpack_add);
        }
        block += static_cast<std::size_t>(k.width) * sizeof(W);
      }
    }
  }
}

// Calls f(T{}) with T the C++ type of a dtype that can travel.
template <class F>
void dispatch_travelling(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(bf16{});
    default: break;
  }
  WF_FAIL("ulysses_block: dtype {} cannot travel (f32, f64 or bf16)", dtype_name(dtype));
}

double load(DType dtype, const std::byte* p) {
  double v = 0;
  dispatch_travelling(dtype, [&](auto tag) {
    using T = decltype(tag);
    T x;
    std::memcpy(&x, p, sizeof x);
    v = to_double(x);
  });
  return v;
}
void store(DType dtype, std::byte* p, double v) {
  dispatch_travelling(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T x = from_double<T>(v);
    std::memcpy(p, &x, sizeof x);
  });
}

}  // namespace

void ulysses_block(const UlyssesBlock& block, void* tensor, void* message) {
  dispatch_travelling(block.wire, [&](auto w) {
    dispatch_travelling(block.dtype, [&](auto e) {
      using W = decltype(w);
      using E = decltype(e);
      walk_block<W>(block, static_cast<E*>(tensor), static_cast<std::byte*>(message));
    });
  });
}

// Element by element through double: exact for every widening and correctly rounded for every
// narrowing, as the kernel. A sum converts the message's element to the tensor's dtype first;
// two floats within 2^29 of each other (any the tests draw) add exactly in double, so rounding
// their sum once gives the float sum.
void ulysses_block_reference(const UlyssesBlock& block, void* tensor, void* message) {
  WF_CHECK(block.move != BlockMove::unpack_add || block.dtype != DType::bf16,
           "ulysses_block_reference: a sum needs an f32 or f64 tensor");
  auto* base = static_cast<std::byte*>(tensor);
  auto* msg = static_cast<std::byte*>(message);
  const std::size_t elem = dtype_size(block.dtype), wire = dtype_size(block.wire);
  const auto n = static_cast<std::int64_t>(block.rows.size());
  std::int64_t at = 0;  // elements into the message
  for (std::int64_t b = 0; b < block.batch; ++b) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t hh = 0; hh < block.block_heads; ++hh) {
        const std::int64_t first = block.element(b, block.rows[static_cast<std::size_t>(i)], block.first_head + hh);
        for (std::int64_t c = 0; c < block.width; ++c, ++at) {
          std::byte* t = base + static_cast<std::size_t>(first + c) * elem;
          std::byte* m = msg + static_cast<std::size_t>(at) * wire;
          switch (block.move) {
            case BlockMove::pack: store(block.wire, m, load(block.dtype, t)); break;
            case BlockMove::unpack: store(block.dtype, t, load(block.wire, m)); break;
            case BlockMove::unpack_add: {
              std::byte converted[sizeof(double)];  // the message's element in the tensor's dtype
              store(block.dtype, converted, load(block.wire, m));
              store(block.dtype, t, load(block.dtype, t) + load(block.dtype, converted));
              break;
            }
          }
        }
      }
    }
  }
}

#define WF_INSTANTIATE_SP_ATTENTION(T)                                                                              \
  template void team_lse_combine<T>(int, std::int64_t, int, const T*, T*, T*);                                      \
  template void team_lse_combine_reference<T>(int, std::int64_t, int, const T*, double*, double*);                  \
  template void scale_attention_rows<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*, const T*);      \
  template void scale_attention_rows_reference<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*, \
                                                  const T*, double*);                                               \
  template void attention_minus_delta<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*,          \
                                         const T*, const T*, T*);                                                   \
  template void attention_minus_delta_reference<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,          \
                                                   const T*, const T*, const T*, double*);
WF_INSTANTIATE_SP_ATTENTION(float)
WF_INSTANTIATE_SP_ATTENTION(double)
#undef WF_INSTANTIATE_SP_ATTENTION

}  // namespace wf::kernels::cpu
