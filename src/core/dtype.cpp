#include "wallfacer/core/dtype.h"

#include <cmath>

namespace wf {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  WF_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::f32;
  if (name == "f64" || name == "float64" || name == "double") return DType::f64;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16" || name == "half") return DType::f16;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "int64") return DType::i64;
  if (name == "u8" || name == "uint8") return DType::u8;
  WF_FAIL("unknown dtype '{}': expected one of f32, f64, bf16, f16, i32, i64, u8", name);
}

float double_to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);  // truncate
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u |= 1u;  // sticky: the value was inexact
  std::memcpy(&f, &u, sizeof f);
  return f;
}

int significand_bits(DType dtype) {
  switch (dtype) {
    case DType::f32: return 24;
    case DType::f64: return 53;
    case DType::bf16: return 8;
    case DType::f16: return 11;
    default: break;
  }
  WF_FAIL("significand_bits: {} is not a floating dtype", dtype_name(dtype));
}

// IEEE half precision, round to nearest-even, with subnormals, infinities and NaN.
float f16_to_float(f16 v) {
  const std::uint32_t sign = (v.bits & 0x8000u) << 16;
  const std::uint32_t exp = (v.bits >> 10) & 0x1fu;
  const std::uint32_t man = v.bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

f16 float_to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<std::uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow → inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: scale so the integer part is the f16 mantissa, then round half-even.
    float a;
    std::memcpy(&a, &abs, sizeof a);
    const float scaled = a * 16777216.0f;  // 2^24
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest-even
    return f16{static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r))};
  }
  std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  const std::uint32_t exp = (rounded >> 23) - 112;
  const std::uint32_t man = (rounded >> 13) & 0x3ffu;
  return f16{static_cast<std::uint16_t>(sign | (exp << 10) | man)};
}

}  // namespace wf
