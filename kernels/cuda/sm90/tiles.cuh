#pragma once
// Tiles of bf16 rows into shared memory in wgmma's K-major core-matrix layout (wgmma.cuh), as the
// sm_90 attention kernels load them: 64-row tiles of a [len, heads, D] tensor, rows past the
// tensor's end zero (so that they multiply as zeros, never as stale bits). A block is one
// warpgroup; every thread calls these alike.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/sm90/wgmma.cuh"
#include "kernels/kernel_args.h"

namespace wf::kernels::cuda::sm90 {

constexpr int kThreads = 128;  // one warpgroup: a block of the sm_90 kernels
constexpr int kTileRows = 64;  // rows of a tile: wgmma's M, and the N and K of the other side

// Rows [0, count) of a [rows × D] tile (row r at src + r·stride) as a K-major operand [rows × D]
// (element (r, c) at core_offset(r, c, D)), 16 bytes per cp.async; rows [count, rows) zero. The
// caller commits and waits for the copies.
template <int D>
__device__ void copy_tile_async(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t stride, int rows,
                                std::int64_t count) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int e = threadIdx.x; e < rows * kChunks; e += kThreads) {
    const int r = e / kChunks, c = (e % kChunks) * 8;
    const bool valid = r < count;
    copy_16_async(dst + core_offset(r, c, D), valid ? src + r * stride + c : src, valid);
  }
}

// Rows [0, count) of a [kTileRows × D] tile transposed: the K-major operand [D × kTileRows] whose
// element (n, j) is row j's column n (at core_offset(n, j, kTileRows)), through registers (16 bytes
// read per thread, neighbouring threads on one row: coalesced); rows [count, kTileRows) zero.
// Ordinary stores: fence_shared_for_wgmma and a barrier before a wgmma reads them.
template <int D>
__device__ void copy_tile_transposed(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t stride,
                                     std::int64_t count) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kTileRows * kChunks; e += kThreads) {
    const int j = e / kChunks, n0 = (e % kChunks) * 8;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (j < count) raw = *reinterpret_cast<const uint4*>(src + j * stride + n0);
    const __nv_bfloat16* values = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[core_offset(n0 + i, j, kTileRows)] = values[i];
  }
}

// The columns [begin, end) of a key tile [k0, k0 + kn) that a row with key range `range` sees, as
// small ints: the softmax then masks each of the thread's 16 columns with two int compares.
struct VisibleColumns {
  int begin, end;
  __device__ __forceinline__ bool has(int column) const { return column >= begin && column < end; }
};
__device__ __forceinline__ VisibleColumns visible_columns(const KeyRange& range, std::int64_t k0, std::int64_t kn) {
  const std::int64_t begin = range.begin - k0 < 0 ? 0 : range.begin - k0 > kn ? kn : range.begin - k0;
  const std::int64_t end = range.end - k0 < begin ? begin : range.end - k0 > kn ? kn : range.end - k0;
  return {static_cast<int>(begin), static_cast<int>(end)};
}

// The m16n8k16 A fragments (4 registers of bf16 pairs per k-step of 16 columns) of a warpgroup's
// 64 × 64 f32 accumulator, columns 16c .. 16c + 15 for k-step c: the accumulator registers of
// n-blocks 2c and 2c + 1, rounded to bf16. So a result of one wgmma feeds the next as its A.
__device__ __forceinline__ void pack_fragments(const float (&acc)[32], std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[c][i] = pack_bf16(acc[8 * c + 2 * i], acc[8 * c + 2 * i + 1]);
  }
}

}  // namespace wf::kernels::cuda::sm90
