#pragma once
// Hopper's warpgroup matrix multiply (wgmma, sm_90a) and the pieces around it, as the sm_90
// attention kernels use them. Compiled only into code for sm_90a (the wallfacer_sm90 object
// library of CMakeLists.txt: the instructions exist on no other architecture). Written from the PTX ISA's description
// (wgmma.mma_async, "Matrix Descriptor Format", "Shared Memory Matrix Layout"); see
// docs/kernels-attention.md, "The sm_90 kernels", for what has and has not run on a GPU.
//
// Operands in shared memory use the K-major layout without swizzling: the matrix is cut into
// core matrices of 8 rows × 16 bytes (8 bf16 along K), each stored as 128 contiguous bytes, row
// after row. Core matrices adjacent along K are kLeadingBytes apart; groups of 8 rows (along M
// or N) are `stride` bytes apart. tiles.cuh lays the kernels' tiles out with core_offset(); the
// kernels name them with descriptor().
#include <cuda_bf16.h>

#include <cstdint>

namespace wf::kernels::cuda::sm90 {

// Bytes between core matrices adjacent along K (one core matrix: 8 rows of 16 bytes).
constexpr std::uint32_t kLeadingBytes = 128;

// The element offset of (row, k) in a K-major tile of `k_size` elements per row (a multiple of 8).
__device__ __forceinline__ int core_offset(int row, int k, int k_size) {
  return (row >> 3) * (k_size * 8) + (k >> 3) * 64 + (row & 7) * 8 + (k & 7);
}

// The 64-bit shared-memory matrix descriptor: start address, leading (K) and stride (M/N) byte
// offsets, each in units of 16 bytes; base offset 0 and no swizzle (bits 62-63 zero).
__device__ __forceinline__ std::uint64_t descriptor(const void* tile, std::uint32_t stride_bytes) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(tile));
  return std::uint64_t{(address & 0x3FFFF) >> 4} | (std::uint64_t{(kLeadingBytes & 0x3FFFF) >> 4} << 16) |
         (std::uint64_t{(stride_bytes & 0x3FFFF) >> 4} << 32);
}

// wgmma.fence: orders this thread's register accesses (accumulators, A fragments) before the
// warpgroup's next wgmma reads or writes them.
__device__ __forceinline__ void warpgroup_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void warpgroup_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until every committed wgmma of this warpgroup has finished (its accumulators are final).
__device__ __forceinline__ void warpgroup_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator register across a wgmma
// boundary: the asm statements above do not name the registers a pending wgmma writes.
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(x[i]);
}

// Makes this thread's ordinary shared-memory writes (stores, cp.async) visible to the async proxy
// that wgmma reads shared memory through; a block barrier after it publishes every thread's.
__device__ __forceinline__ void fence_shared_for_wgmma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// 16 bytes global -> shared without passing through registers; valid == false writes 16 zero
// bytes and reads nothing (src must still be a valid address).
__device__ __forceinline__ void copy_16_async(void* dst, const void* src, bool valid) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void copies_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Two f32 as one register of two bf16, the lower column in the low half (an MMA fragment's order).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&pair);
}

#include "kernels/cuda/sm90/wgmma_instructions.inc"

}  // namespace wf::kernels::cuda::sm90
