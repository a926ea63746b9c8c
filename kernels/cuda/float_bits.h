#pragma once
// The CPU's conversions between f64, f32 and bf16 (include/wallfacer/core/dtype.h), bit for bit,
// for device and host alike: bf16 is its 16 bits (wf::bf16::bits, __nv_bfloat16's bits). CUDA's
// own __float2bfloat16_rn rounds alike but gives another NaN payload, and f64 → bf16 must round
// once (through f32 rounded to odd), so the kernels that move bf16 use these.
// tests/kernels/test_cuda_bit_exact.cpp compares them with core's on the host. Free of fmt.
#include <cstdint>
#include <cstring>

#include "kernels/cuda/host_device.h"

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
  float f = static_cast<float>(v);  // to nearest, as the CPU's cast
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
