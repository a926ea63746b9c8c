// Dtype conversion and fill on CUDA devices (convert.h): one thread per element (grid-stride),
// each converted by element_convert.h, which matches the CPU bit for bit.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "src/core/cuda/convert.h"
#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/element_convert.h"

namespace wf::detail {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // a grid-stride loop covers the rest

int blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

using element::Bf16;
using element::F16;
using element::convert_one;

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
