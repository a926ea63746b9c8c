#pragma once
// The CPU's conversions between f64, f32 and bf16 (include/wallfacer/core/dtype.h), bit for bit,
// for device and host alike: bf16 is its 16 bits (wf::bf16::bits, __nv_bfloat16's bits). The
// device's own conversions differ from the host's in two ways these spell out: its cvt between
// float and double gives a canonical NaN where x86 keeps the sign and payload (quieted), and
// __float2bfloat16_rn gives another NaN; and f64 → bf16 must round once (through f32 rounded to
// odd). tests/kernels/test_cuda_bit_exact.cpp compares them with the host's on the host. Free of fmt.
#include <cstdint>
#include <cstring>

#include "src/core/host_device.h"

namespace wf::kernels::cuda {

WF_HOST_DEVICE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
WF_HOST_DEVICE float float_of_bits(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

WF_HOST_DEVICE std::uint64_t double_bits(double d) {
  std::uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
WF_HOST_DEVICE double double_of_bits(std::uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

// static_cast<double>(f) as x86's cvtss2sd: a NaN keeps its sign and payload (moved to the top
// of the wider field) and becomes quiet.
WF_HOST_DEVICE double float_to_double(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    const std::uint64_t sign = static_cast<std::uint64_t>(u >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>((u & 0x7fffffu) | 0x400000u) << 29;
    return double_of_bits(sign | 0x7ff0000000000000ull | payload);
  }
  return static_cast<double>(f);
}

// static_cast<float>(v) (round to nearest even) as x86's cvtsd2ss: a NaN keeps its sign and the
// top 23 bits of its payload and becomes quiet.
WF_HOST_DEVICE float double_to_float(double v) {
  const std::uint64_t u = double_bits(v);
  if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) {
    const std::uint32_t sign = static_cast<std::uint32_t>(u >> 63) << 31;
    const std::uint32_t payload = (static_cast<std::uint32_t>(u >> 29) & 0x7fffffu) | 0x400000u;
    return float_of_bits(sign | 0x7f800000u | payload);
  }
  return static_cast<float>(v);
}

// wf::bf16_to_float.
WF_HOST_DEVICE float bf16_bits_to_float(std::uint16_t bits) { return float_of_bits(static_cast<std::uint32_t>(bits) << 16); }

// wf::float_to_bf16: round to nearest even; a NaN stays a quiet NaN with its sign and top payload.
WF_HOST_DEVICE std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// wf::double_to_float_round_odd: truncate toward zero and set the last bit when anything was
// dropped, so that rounding the result to bf16 rounds the double once.
WF_HOST_DEVICE float double_to_float_round_odd(double v) {
  const float f = double_to_float(v);  // to nearest, as the CPU's cast
  std::uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u || static_cast<double>(f) == v) return f;  // inf, NaN or exact
  const double back = static_cast<double>(f);
  // |f| > |v| >= 0, so f is not zero: one step toward zero is one less in the magnitude bits
  // (std::nextafter(f, 0) on the CPU; from the smallest subnormal it reaches a signed zero).
  if ((back < 0 ? -back : back) > (v < 0 ? -v : v)) u -= 1u;
  return float_of_bits(u | 1u);
}

// wf::from_double<bf16>.
WF_HOST_DEVICE std::uint16_t double_to_bf16_bits(double v) { return float_to_bf16_bits(double_to_float_round_odd(v)); }

}  // namespace wf::kernels::cuda
