#pragma once
// The CPU's conversions between f64, f32 and bf16 (include/wallfacer/core/dtype.h), bit for bit,
// for device and host alike, with bf16 as its 16 bits (wf::bf16::bits, __nv_bfloat16's bits): the
// kernels' names for core's conversion rules (src/core/cuda/element_convert.h), which spell out
// where the device's own conversions differ from the host's (its float ↔ double cvt makes every
// NaN canonical, __float2bfloat16_rn gives another NaN, and f64 → bf16 must round once, through
// f32 rounded to odd). tests/kernels/test_cuda_bit_exact.cpp and tests/core/cuda_convert_rules_test.cpp
// compare them with the host's on the host. Free of fmt.
#include <cstdint>

#include "src/core/cuda/element_convert.h"
#include "src/core/host_device.h"

namespace wf::kernels::cuda {

namespace element = ::wf::detail::element;

WF_HOST_DEVICE std::uint32_t float_bits(float f) { return element::float_bits(f); }
WF_HOST_DEVICE float float_of_bits(std::uint32_t u) { return element::float_from_bits(u); }
WF_HOST_DEVICE std::uint64_t double_bits(double d) { return element::double_bits(d); }
WF_HOST_DEVICE double double_of_bits(std::uint64_t u) { return element::double_from_bits(u); }

// static_cast<double>(f) and static_cast<float>(v) as x86 does them (NaN sign and payload kept).
WF_HOST_DEVICE double float_to_double(float f) { return element::float_to_double(f); }
WF_HOST_DEVICE float double_to_float(double v) { return element::double_to_float(v); }

// wf::bf16_to_float and wf::float_to_bf16 (round to nearest even; a NaN stays a quiet NaN).
WF_HOST_DEVICE float bf16_bits_to_float(std::uint16_t bits) { return element::bf16_to_float(element::Bf16{bits}); }
WF_HOST_DEVICE std::uint16_t float_to_bf16_bits(float f) { return element::float_to_bf16(f).bits; }

// f64 → f32 rounded to odd, so that a second rounding to bf16 rounds once.
WF_HOST_DEVICE float double_to_float_round_odd(double v) { return element::double_to_float_round_odd(v); }
WF_HOST_DEVICE std::uint16_t double_to_bf16_bits(double v) { return float_to_bf16_bits(double_to_float_round_odd(v)); }

}  // namespace wf::kernels::cuda
