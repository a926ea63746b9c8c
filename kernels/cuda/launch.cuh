#pragma once
// Device-side helpers shared by the CUDA kernels (kernels/cuda/*.cu): launch sizes, the
// accumulation type, bf16 loads, and warp and block reductions. nvcc only.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace wf::kernels::cuda {

constexpr int kThreads = 256;     // threads per block of the elementwise kernels
constexpr int kMaxBlocks = 65535 * 8;  // grid-stride loops cover the rest

// Blocks of `threads` for n elements, capped: the kernels loop with a grid stride.
inline int blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// for (i = this thread's first; i < n; i += grid size): every index once, in 64 bits.
#define WF_GRID_STRIDE_LOOP(i, n)                                                                    \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// The type a kernel accumulates T in: float stays float (as the CPU kernels do, unless their
// comment says double), double stays double.
template <class T>
struct Accum {
  using type = T;
};
template <>
struct Accum<__nv_bfloat16> {
  using type = float;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ double to_float(double x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
// The maximum over the warp, to every lane; a NaN in any lane makes it NaN in every lane. (Taking
// o only when o > v would keep a lane's own NaN but pass over its partner's: the lanes would
// disagree, and a branch on the result, then a full-mask shuffle inside it, would split the warp.)
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = (o > v || o != o) ? o : v;
  }
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. `scratch` is __shared__ T[32]. Contains __syncthreads: every thread must call it.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}
// The maximum of v over the block, to every thread (as block_sum; `lowest` fills idle lanes).
template <class T>
__device__ T block_max(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return warp_max(v);
}

}  // namespace wf::kernels::cuda
