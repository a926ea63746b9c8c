#pragma once
// Element types. bf16 and f16 are storage types on the CPU: kernels compute in f32 and round
// to nearest-even when they store.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <string>
#include <string_view>

#include "wallfacer/core/error.h"

namespace wf {

enum class DType : std::uint8_t { f32, f64, bf16, f16, i32, i64, u8 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(std::string_view name);  // "f32", "float32", "bf16", ... ; wf::Error otherwise
inline bool is_floating(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16; }

// 16-bit float storage types. Conversions round to nearest-even and keep NaN a NaN.
struct bf16 {
  std::uint16_t bits = 0;
};
struct f16 {
  std::uint16_t bits = 0;
};

inline float bf16_to_float(bf16 v) {
  std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline bf16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}
float f16_to_float(f16 v);
f16 float_to_f16(float f);

template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of `dtype`, for every dtype.
template <typename F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    case DType::u8: return f(std::uint8_t{});
  }
  WF_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

// Calls f(T{}) with T = float or double: the compute types of CPU kernels. `what` names the
// operation in the error for other dtypes.
template <typename F>
decltype(auto) dispatch_float(DType dtype, std::string_view what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: break;
  }
  WF_FAIL("{}: dtype {} is not supported here (f32 or f64 expected; convert with .to(DType::f32))", what,
          dtype_name(dtype));
}

// Scalar conversions between any storage type and double, used by element access and casts.
template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(v);
  else if constexpr (std::is_same_v<T, f16>) return f16_to_float(v);
  else return static_cast<double>(v);
}
// double → float rounded to odd: truncate, then set the last bit if anything was dropped.
// Rounding that result to a narrower format (bf16, f16) gives the correctly rounded value of
// the double — rounding twice through a round-to-nearest f32 would not.
float double_to_float_round_odd(double v);

// Conversions from double saturate for integer types (NaN → 0), so out-of-range values never
// hit undefined behaviour.
template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16>) return float_to_bf16(double_to_float_round_odd(v));
  else if constexpr (std::is_same_v<T, f16>) return float_to_f16(double_to_float_round_odd(v));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else {
    if (v != v) return T{0};
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

// Significand bits (with the implicit one) of a floating dtype: 24 for f32, 53 for f64, 8 for
// bf16, 11 for f16. Uniform draws are quantised to this many bits so they stay below 1.
int significand_bits(DType dtype);

}  // namespace wf
