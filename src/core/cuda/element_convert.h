#pragma once
// One element's dtype conversion on CUDA devices (convert.cu's kernels), written to give the
// CPU's bytes (wallfacer/core/dtype.h: to_double, from_double, the bf16 and f16 roundings; the
// direct paths of src/core/host_copy.cpp). Two things the GPU would otherwise do differently are
// spelled out: NaN through float <-> double keeps its sign and payload and becomes quiet, as
// x86's cvtss2sd / cvtsd2ss do (the GPU's cvt makes it canonical), and the bf16 / f16 roundings
// are bit arithmetic, as on the host. nvcc compiles without --use_fast_math and -ftz, so float
// arithmetic keeps subnormals as the host's does.
//
// Host and device code: tests/core/cuda_convert_rules_test.cpp compiles it for the CPU and
// requires every dtype pair to match host_convert bit for bit (every 16-bit pattern, random
// bits, rounding ties), so the kernels' arithmetic is checked where no GPU is. Free of fmt and
// of the other wallfacer headers (nvcc compiles it).
#include <cstdint>
#include <cstring>
#include <type_traits>
#ifndef __CUDA_ARCH__
#include <cmath>
#endif

#include "src/core/host_device.h"

namespace wf::detail::element {

// ---- bits, and the few library functions, alike on both sides ----------------------------------
WF_HOST_DEVICE std::uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
WF_HOST_DEVICE float float_from_bits(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
WF_HOST_DEVICE std::uint64_t double_bits(double d) {
#ifdef __CUDA_ARCH__
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}
WF_HOST_DEVICE double double_from_bits(std::uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}
WF_HOST_DEVICE bool is_nan(float f) { return (float_bits(f) & 0x7fffffffu) > 0x7f800000u; }
WF_HOST_DEVICE bool is_nan(double d) { return (double_bits(d) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
WF_HOST_DEVICE bool is_finite(float f) { return (float_bits(f) & 0x7f800000u) != 0x7f800000u; }
WF_HOST_DEVICE double abs_of(double d) { return double_from_bits(double_bits(d) & 0x7fffffffffffffffull); }
// To the nearest integer, ties to even (the default rounding mode on both sides).
WF_HOST_DEVICE float round_half_even(float f) {
#ifdef __CUDA_ARCH__
  return rintf(f);
#else
  return std::nearbyint(f);
#endif
}

// The 16-bit float storage types (wf::bf16, wf::f16: the same bits).
struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

template <class T>
struct IntLimits;
template <>
struct IntLimits<std::int32_t> {
  static constexpr std::int32_t lowest = INT32_MIN, max = INT32_MAX;
};
template <>
struct IntLimits<std::int64_t> {
  static constexpr std::int64_t lowest = INT64_MIN, max = INT64_MAX;
};
template <>
struct IntLimits<std::uint8_t> {
  static constexpr std::uint8_t lowest = 0, max = UINT8_MAX;
};

// ---- float <-> double, NaN as x86 converts it ---------------------------------------------------
WF_HOST_DEVICE double float_to_double(float f) {
  if (is_nan(f)) {  // quiet, sign and payload kept (the payload moves to the top of the wider field)
    const std::uint32_t u = float_bits(f);
    const std::uint64_t sign = static_cast<std::uint64_t>(u >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>((u & 0x7fffffu) | 0x400000u) << 29;
    return double_from_bits(sign | 0x7ff0000000000000ull | payload);
  }
  return static_cast<double>(f);
}

WF_HOST_DEVICE float double_to_float(double v) {
  if (is_nan(v)) {  // quiet, sign and the payload's top 23 bits kept
    const std::uint64_t u = double_bits(v);
    const std::uint32_t sign = static_cast<std::uint32_t>(u >> 63) << 31;
    const std::uint32_t payload = (static_cast<std::uint32_t>(u >> 29) & 0x7fffffu) | 0x400000u;
    return float_from_bits(sign | 0x7f800000u | payload);
  }
  return static_cast<float>(v);  // round to nearest-even
}

// dtype.cpp's double_to_float_round_odd: truncate, then set the last bit if anything was dropped.
WF_HOST_DEVICE float double_to_float_round_odd(double v) {
  const float f = double_to_float(v);
  if (!is_finite(f) || static_cast<double>(f) == v) return f;
  std::uint32_t u = float_bits(f);
  if (abs_of(static_cast<double>(f)) > abs_of(v)) u -= 1u;  // one step toward zero (f is not 0 here)
  return float_from_bits(u | 1u);
}

// ---- bf16 and f16 (dtype.h, dtype.cpp) ----------------------------------------------------------
WF_HOST_DEVICE float bf16_to_float(Bf16 v) { return float_from_bits(static_cast<std::uint32_t>(v.bits) << 16); }

WF_HOST_DEVICE Bf16 float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return Bf16{static_cast<std::uint16_t>(u >> 16)};
}

WF_HOST_DEVICE float f16_to_float(F16 v) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(v.bits) & 0x8000u) << 16;
  const std::uint32_t exp = (v.bits >> 10) & 0x1fu;
  const std::uint32_t man = v.bits & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return float_from_bits(sign);
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // subnormal: man * 2^-24, exact
    return sign != 0 ? -f : f;
  }
  if (exp == 31) return float_from_bits(sign | 0x7f800000u | (man << 13));
  return float_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

WF_HOST_DEVICE F16 float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return F16{static_cast<std::uint16_t>(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return F16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: scale so the integer part is the mantissa, round half-even.
    const float scaled = float_from_bits(abs) * 16777216.0f;  // 2^24, exact
    const float r = round_half_even(scaled);
    return F16{static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r))};
  }
  const std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  const std::uint32_t exp = (rounded >> 23) - 112;
  const std::uint32_t man = (rounded >> 13) & 0x3ffu;
  return F16{static_cast<std::uint16_t>(sign | (exp << 10) | man)};
}

// ---- to_double / from_double (dtype.h) ---------------------------------------------------------
template <class T>
WF_HOST_DEVICE double to_double(T x) {
  if constexpr (std::is_same_v<T, float>) return float_to_double(x);
  else if constexpr (std::is_same_v<T, Bf16>) return float_to_double(bf16_to_float(x));
  else if constexpr (std::is_same_v<T, F16>) return float_to_double(f16_to_float(x));
  else return static_cast<double>(x);  // exact, or (i64) rounded to nearest as on the host
}

template <class T>
WF_HOST_DEVICE T from_double(double v) {
  if constexpr (std::is_same_v<T, Bf16>) return float_to_bf16(double_to_float_round_odd(v));
  else if constexpr (std::is_same_v<T, F16>) return float_to_f16(double_to_float_round_odd(v));
  else if constexpr (std::is_same_v<T, float>) return double_to_float(v);
  else if constexpr (std::is_same_v<T, double>) return v;
  else {  // integers saturate, NaN becomes 0, the rest truncates toward zero
    if (is_nan(v)) return T{0};
    if (v <= static_cast<double>(IntLimits<T>::lowest)) return IntLimits<T>::lowest;
    if (v >= static_cast<double>(IntLimits<T>::max)) return IntLimits<T>::max;
    return static_cast<T>(v);
  }
}

// One element, as host_copy.cpp's convert_range converts it.
template <class S, class D>
WF_HOST_DEVICE D convert_one(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Bf16>) return float_to_bf16(x);
  else if constexpr (std::is_same_v<S, Bf16> && std::is_same_v<D, float>) return bf16_to_float(x);
  // The host compiler folds f16 -> float -> double -> float to f16 -> float, so the CPU keeps a
  // signalling NaN's quiet bit clear here (measured against host_convert, every f16 bit pattern).
  else if constexpr (std::is_same_v<S, F16> && std::is_same_v<D, float>) return f16_to_float(x);
  else return from_double<D>(to_double(x));
}

}  // namespace wf::detail::element

