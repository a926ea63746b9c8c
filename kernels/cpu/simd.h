#pragma once
// Explicit SIMD for float kernels, written once over W lanes with GCC vector extensions and
// compiled once per x86 ISA level: 4 lanes (SSE2), 8 (AVX2 + FMA), 16 (AVX-512F).
//
// Why: the library is built for baseline x86-64 (it must run on any x86-64 machine), so plain
// loops only get SSE2, and some never vectorise at all — std::exp/std::tanh are libm calls, and
// GCC keeps float compares as branches under the default -ftrapping-math. A kernel that matters
// writes its inner loop once as a template over W using the helpers below, instantiates it per
// ISA with WF_SIMD_FOR_EACH_ISA, and picks the widest the CPU runs once, at first use, with
// WF_SIMD_PICK (kernels/cpu/attention.cpp and elementwise.cpp show the pattern). Lane order is
// fixed, so reductions are deterministic on a given machine; on other CPUs only the 4-lane
// version exists and maps onto 128-bit SIMD (e.g. NEON).
//
// The wide-lane helpers take and return vectors by value; they are always inlined into functions
// compiled for their ISA, so no such value crosses a call and GCC's note about the AVX calling
// convention does not apply. (GCC reports it where templates are emitted, at the end of the
// including file, so the suppression cannot be scoped.)
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_dispatch.h"

namespace wf::kernels::cpu::simd {

// (Explicit specialisations: GCC drops vector_size on a dependent alias template.)
template <int W>
struct Lanes;
template <>
struct Lanes<4> {
  typedef float Float __attribute__((vector_size(16)));
  typedef std::int32_t Int __attribute__((vector_size(16)));
};
template <>
struct Lanes<8> {
  typedef float Float __attribute__((vector_size(32)));
  typedef std::int32_t Int __attribute__((vector_size(32)));
};
template <>
struct Lanes<16> {
  typedef float Float __attribute__((vector_size(64)));
  typedef std::int32_t Int __attribute__((vector_size(64)));
};
template <int W>
using FloatLanes = typename Lanes<W>::Float;
template <int W>
using IntLanes = typename Lanes<W>::Int;

template <int W>
[[gnu::always_inline]] inline FloatLanes<W> splat(float x) {
  return FloatLanes<W>{} + x;
}
// Lanes [0, n) from p, the others set to `fill`.
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> load(const float* p, std::int64_t n = W, float fill = 0) {
  FloatLanes<W> v = splat<W>(fill);
  std::memcpy(&v, p, static_cast<std::size_t>(n) * sizeof(float));
  return v;
}
template <int W>
[[gnu::always_inline]] inline void store(float* p, const FloatLanes<W>& v, std::int64_t n = W) {
  std::memcpy(p, &v, static_cast<std::size_t>(n) * sizeof(float));
}
template <int W>
[[gnu::always_inline]] inline float horizontal(const FloatLanes<W>& v, float (*op)(float, float)) {
  float r = v[0];
  for (int l = 1; l < W; ++l) r = op(r, v[l]);
  return r;
}
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> abs(const FloatLanes<W>& x) {
  return reinterpret_cast<FloatLanes<W>>(reinterpret_cast<IntLanes<W>>(x) & 0x7fffffff);
}
// |magnitude| with the sign of `sign`.
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> copysign(const FloatLanes<W>& magnitude, const FloatLanes<W>& sign) {
  const IntLanes<W> m = reinterpret_cast<IntLanes<W>>(magnitude) & 0x7fffffff;
  const IntLanes<W> s = reinterpret_cast<IntLanes<W>>(sign) & static_cast<std::int32_t>(0x80000000u);
  return reinterpret_cast<FloatLanes<W>>(m | s);
}

// eˣ for x <= 88 (callers exponentiate values <= 0, such as s − max); 0 below the smallest
// normal float and for -inf, NaN for NaN; within 1.4 ulp of std::exp. Cody–Waite reduction to
// |r| <= ln2/2, the Cephes degree-6 polynomial, 2ⁿ built in the exponent bits.
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> exp_bounded(const FloatLanes<W>& x) {
  const FloatLanes<W> lo = splat<W>(-87.33654f);  // ln(FLT_MIN): 2ⁿ stays a normal float
  const FloatLanes<W> hi = splat<W>(88.0f);
  // Compares written so that a NaN input falls through every select and comes out NaN.
  FloatLanes<W> xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // Round to nearest by the 1.5·2²³ trick (plain adds: no SSE4.1 round needed).
  const FloatLanes<W> n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const FloatLanes<W> r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 = short high part + rest
  FloatLanes<W> p = splat<W>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto two_n = reinterpret_cast<FloatLanes<W>>((__builtin_convertvector(n, IntLanes<W>) + 127) << 23);
  return x < lo ? splat<W>(0.0f) : p * two_n;
}

// tanh(x) = sign(x)·(1 − e^(−2|x|)) / (1 + e^(−2|x|)): the exponent is <= 0, so exp_bounded
// applies and nothing overflows (±1 for large |x|, NaN for NaN). Absolute error <= ~2e-7;
// relative error grows below |x| ~ 1e-3, where callers (GELU's 1 + tanh) only need absolute.
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> tanh(const FloatLanes<W>& x) {
  const FloatLanes<W> e = exp_bounded<W>(abs<W>(x) * -2.0f);
  return copysign<W>((1.0f - e) / (1.0f + e), x);
}

// max_j x[j] over [0, n): -inf for n = 0; NaNs are skipped (as `x > m` comparisons do).
template <int W>
[[gnu::always_inline]] inline float row_max(const float* x, std::int64_t n) {
  constexpr float kNegInf = -__builtin_inff();
  FloatLanes<W> m = splat<W>(kNegInf);
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    const FloatLanes<W> v = load<W>(x + j);
    m = v > m ? v : m;
  }
  if (j < n) {  // padding lanes hold -inf
    const FloatLanes<W> tail = load<W>(x + j, n - j, kNegInf);
    m = tail > m ? tail : m;
  }
  return horizontal<W>(m, [](float a, float b) { return a > b ? a : b; });
}

// out[j] = scale·exp(x[j] − shift) for j < n when out is not null (out may alias x); returns
// Σ exp(x[j] − shift), summed in W lanes in a fixed order. Needs x[j] − shift <= 88.
template <int W>
[[gnu::always_inline]] inline float exp_shifted_sum(const float* x, std::int64_t n, float shift, float* out,
                                                    float scale) {
  FloatLanes<W> sum = splat<W>(0.0f);
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    const FloatLanes<W> e = exp_bounded<W>(load<W>(x + j) - shift);
    if (out != nullptr) store<W>(out + j, e * scale);
    sum += e;
  }
  if (j < n) {  // padding lanes hold -inf, whose exp is 0
    const FloatLanes<W> e = exp_bounded<W>(load<W>(x + j, n - j, -__builtin_inff()) - shift);
    if (out != nullptr) store<W>(out + j, e * scale, n - j);
    sum += e;
  }
  return horizontal<W>(sum, [](float a, float b) { return a + b; });
}

}  // namespace wf::kernels::cpu::simd
