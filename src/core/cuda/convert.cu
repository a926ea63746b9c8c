// Dtype conversion and fill on CUDA devices (convert.h). Each conversion is the CPU's
// (wallfacer/core/dtype.h: to_double, from_double, the bf16 and f16 roundings; the direct
// f32 <-> bf16 paths of src/core/host_copy.cpp) written again for the device, so that a tensor
// converted on the GPU has the CPU's bytes. Two things the device would otherwise do differently
// are spelled out: NaN through float <-> double keeps its sign and payload and becomes quiet, as
// x86's cvtss2sd / cvtsd2ss do (the device's cvt gives a canonical NaN), and the steps of the
// bf16 / f16 roundings are bit arithmetic, as on the host. nvcc compiles without
// --use_fast_math and -ftz, so float arithmetic keeps subnormals as the host's does.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "src/core/cuda/convert.h"
#include "src/core/cuda/cuda_check.h"

namespace wf::detail {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // a grid-stride loop covers the rest

int blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
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
__device__ double float_to_double(float f) {
  if (isnan(f)) {  // quiet, sign and payload kept (the payload moves to the top of the wider field)
    const std::uint32_t u = __float_as_uint(f);
    const std::uint64_t sign = static_cast<std::uint64_t>(u >> 31) << 63;
    const std::uint64_t payload = static_cast<std::uint64_t>((u & 0x7fffffu) | 0x400000u) << 29;
    return __longlong_as_double(static_cast<long long>(sign | 0x7ff0000000000000ull | payload));
  }
  return static_cast<double>(f);
}

__device__ float double_to_float(double v) {
  if (isnan(v)) {  // quiet, sign and the payload's top 23 bits kept
    const auto u = static_cast<std::uint64_t>(__double_as_longlong(v));
    const std::uint32_t sign = static_cast<std::uint32_t>(u >> 63) << 31;
    const std::uint32_t payload = (static_cast<std::uint32_t>(u >> 29) & 0x7fffffu) | 0x400000u;
    return __uint_as_float(sign | 0x7f800000u | payload);
  }
  return static_cast<float>(v);  // round to nearest-even
}

// dtype.cpp's double_to_float_round_odd: truncate, then set the last bit if anything was dropped.
__device__ float double_to_float_round_odd(double v) {
  const float f = double_to_float(v);
  if (!isfinite(f) || static_cast<double>(f) == v) return f;
  std::uint32_t u = __float_as_uint(f);
  if (fabs(static_cast<double>(f)) > fabs(v)) u -= 1u;  // one step toward zero (f is not 0 here)
  return __uint_as_float(u | 1u);
}

// ---- bf16 and f16 (dtype.h, dtype.cpp) ----------------------------------------------------------
__device__ float bf16_to_float(Bf16 v) { return __uint_as_float(static_cast<std::uint32_t>(v.bits) << 16); }

__device__ Bf16 float_to_bf16(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return Bf16{static_cast<std::uint16_t>(u >> 16)};
}

__device__ float f16_to_float(F16 v) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(v.bits) & 0x8000u) << 16;
  const std::uint32_t exp = (v.bits >> 10) & 0x1fu;
  const std::uint32_t man = v.bits & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return __uint_as_float(sign);
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // subnormal: man * 2^-24, exact
    return sign != 0 ? -f : f;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

__device__ F16 float_to_f16(float f) {
  const std::uint32_t u = __float_as_uint(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return F16{static_cast<std::uint16_t>(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return F16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: scale so the integer part is the mantissa, round half-even.
    const float scaled = __uint_as_float(abs) * 16777216.0f;  // 2^24, exact
    const float r = rintf(scaled);
    return F16{static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r))};
  }
  const std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  const std::uint32_t exp = (rounded >> 23) - 112;
  const std::uint32_t man = (rounded >> 13) & 0x3ffu;
  return F16{static_cast<std::uint16_t>(sign | (exp << 10) | man)};
}

// ---- to_double / from_double (dtype.h) ---------------------------------------------------------
template <class T>
__device__ double to_double(T x) {
  if constexpr (std::is_same_v<T, float>) return float_to_double(x);
  else if constexpr (std::is_same_v<T, Bf16>) return float_to_double(bf16_to_float(x));
  else if constexpr (std::is_same_v<T, F16>) return float_to_double(f16_to_float(x));
  else return static_cast<double>(x);  // exact, or (i64) rounded to nearest as on the host
}

template <class T>
__device__ T from_double(double v) {
  if constexpr (std::is_same_v<T, Bf16>) return float_to_bf16(double_to_float_round_odd(v));
  else if constexpr (std::is_same_v<T, F16>) return float_to_f16(double_to_float_round_odd(v));
  else if constexpr (std::is_same_v<T, float>) return double_to_float(v);
  else if constexpr (std::is_same_v<T, double>) return v;
  else {  // integers saturate, NaN becomes 0, the rest truncates toward zero
    if (isnan(v)) return T{0};
    if (v <= static_cast<double>(IntLimits<T>::lowest)) return IntLimits<T>::lowest;
    if (v >= static_cast<double>(IntLimits<T>::max)) return IntLimits<T>::max;
    return static_cast<T>(v);
  }
}

// One element, as host_copy.cpp's convert_range converts it.
template <class S, class D>
__device__ D convert_one(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Bf16>) return float_to_bf16(x);
  else if constexpr (std::is_same_v<S, Bf16> && std::is_same_v<D, float>) return bf16_to_float(x);
  else return from_double<D>(to_double(x));
}

template <class S, class D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = convert_one<S, D>(src[i]);
}

template <class T>
__global__ void fill_kernel(T* __restrict__ dst, T value, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = value;
}

// Calls f(T{}) with the device type of `type`; false for an unknown type.
template <class F>
bool with_element_type(CudaElement type, F&& f) {
  switch (type) {
    case CudaElement::f32: f(float{}); return true;
    case CudaElement::f64: f(double{}); return true;
    case CudaElement::bf16: f(Bf16{}); return true;
    case CudaElement::f16: f(F16{}); return true;
    case CudaElement::i32: f(std::int32_t{}); return true;
    case CudaElement::i64: f(std::int64_t{}); return true;
    case CudaElement::u8: f(std::uint8_t{}); return true;
  }
  return false;
}

}  // namespace

void launch_convert(const void* src, CudaElement src_type, void* dst, CudaElement dst_type, std::int64_t n,
                    cudaStream_t stream) {
  bool known = false;
  with_element_type(src_type, [&](auto s) {
    using S = decltype(s);
    known = with_element_type(dst_type, [&](auto d) {
      using D = decltype(d);
      convert_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  if (!known) throw_cuda_error(cudaErrorInvalidValue, "launch_convert (unknown element type)", __FILE__, __LINE__);
  WF_CUDA_CHECK_LAUNCH("convert_kernel");
}

void launch_fill(void* dst, int element_bytes, std::uint64_t bits, std::int64_t n, cudaStream_t stream) {
  switch (element_bytes) {
    case 1: fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint8_t*>(dst),
                                                                static_cast<std::uint8_t>(bits), n); break;
    case 2: fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint16_t*>(dst),
                                                                static_cast<std::uint16_t>(bits), n); break;
    case 4: fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint32_t*>(dst),
                                                                static_cast<std::uint32_t>(bits), n); break;
    case 8: fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint64_t*>(dst), bits, n); break;
    default: throw_cuda_error(cudaErrorInvalidValue, "launch_fill (element size not 1, 2, 4 or 8)", __FILE__, __LINE__);
  }
  WF_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace wf::detail
