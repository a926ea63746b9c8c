// The attention forward on Hopper's warpgroup MMA (attention.h says what it computes).
//
// One block is one warpgroup (4 warps, 128 threads) and owns a tile of kRows = 64 query rows of
// one head (the last tiles first, as the own kernels order them). Per key tile of kKeys = 64 keys
// that some row of the tile sees (attention_tiles.cuh: keys outside the rows' windows are never
// loaded):
//   1. K [64 keys × d] is in shared memory already, copied (cp.async) while the previous tile
//      computed, in wgmma's K-major core-matrix layout (tiles.cuh, wgmma.cuh), into one of two
//      buffers; the copy of the next tile's K into the other starts now. Q [64 × d] was copied
//      once per query tile the same way.
//   2. S = Q·Kᵀ: d/16 wgmma m64n64k16 with both operands in shared memory, asynchronous: while
//      they run, the warpgroup copies V transposed into shared memory (Vᵀ [d × 64 keys], through
//      registers). The 64 × 64 f32 scores land in registers: thread t of warp w holds rows
//      r0 = 16w + t/4 and r0 + 8, columns 8j + 2(t%4) + {0, 1} for j = 0..7 (the accumulator
//      layout of the m16n8 MMA fragments).
//   3. The online softmax in registers: the rows' running max and the rescale of the O
//      accumulator, each row's max reduced over the 4 threads that share it; P = exp(scale·S − m)
//      on the visible keys, 0 elsewhere. The row sums stay per thread until the end.
//   4. O += P·V: 4 wgmma m64n{d}k16 with P from registers (rounded to bf16, as the CPU's bf16
//      kernel rounds P before its product; the score layout of step 2 is exactly the A fragment
//      of step 4, so P never touches shared memory) and Vᵀ from shared memory.
// Finally o = O / l and lse = m + log l per row; a row that saw no key gets o = 0, lse = −inf.
// So the copies of K overlap a whole tile's products and those of V the scores' products: the
// pipeline FlashAttention-3 builds with TMA and a producer warp, here with cp.async and one
// warpgroup.
//
// What this version does not do yet (docs/kernels-attention.md, "The sm_90 kernels"): TMA and a
// producer warpgroup (warp specialisation), V without its transpose (wgmma's MN-major B),
// swizzled layouts, two consumer warpgroups per block. No GPU has run it: its results are checked
// against the own kernel at each shape's first use before the per-shape choice may pick it.
#include "kernels/cuda/sm90/attention.h"

#include <math.h>

#include <cstdint>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/sm90/tiles.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

using namespace attention_tiles;
using Bf16 = __nv_bfloat16;

constexpr int kRows = sm90::kTileRows;  // query rows per block: wgmma's M
constexpr int kKeys = sm90::kTileRows;  // keys per tile: S's N and P·V's K
using sm90::kThreads;

// Shared memory: Q [kRows × D], two buffers of K [kKeys × D] (this tile's and the next one's),
// Vᵀ [D × kKeys] (bf16, core-matrix layout), then the rows' key ranges. 128-byte aligned regions;
// 81 KiB at d 128.
template <int D>
struct Tiles {
  Bf16 q[kRows * D];
  Bf16 k[2][kKeys * D];
  Bf16 vt[D * kKeys];
  KeyRange ranges[kRows];
};

// At most 168 registers a thread, so that 3 blocks fit an SM's register file beside their shared
// memory (3 × 65 KiB at d 128).
template <int D>
__global__ void __launch_bounds__(kThreads, 3)
    attention_forward_sm90(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                           float* o, float* lse) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  Tiles<D>& t = *reinterpret_cast<Tiles<D>*>(smem_bytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int quad = lane & 3;                  // the thread's column pair in each 8-column block
  const int row0 = 16 * warp + (lane >> 2);  // its two rows: row0 and row0 + 8
  const float scale = float(s.scale);
  const std::int64_t q_stride = s.heads * D, kv_stride = s.kv_heads * D;
  constexpr std::uint32_t kQkStride = D * 16;      // bytes between 8-row groups of Q and K
  constexpr std::uint32_t kVtStride = kKeys * 16;  // ... of Vᵀ

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, kRows, task);
    __syncthreads();  // the previous task is done with the tiles
    load_key_ranges(s, b, i0, rows, kRows, t.ranges);
    sm90::copy_tile_async<D>(t.q, q + q_at(s, b, i0, h), q_stride, kRows, rows);
    sm90::copies_commit();
    __syncthreads();  // the ranges
    const KeyRange range[2] = {t.ranges[row0], t.ranges[row0 + 8]};

    float acc[D / 2];  // O [64 × D]: n-block j holds columns 8j + 2·quad + {0, 1} of rows row0, row0 + 8
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
    float m[2] = {neg_inf<float>(), neg_inf<float>()};
    float l[2] = {0.0f, 0.0f};  // this thread's share of the row sums

    const std::int64_t key_end = t.ranges[rows - 1].end;
    std::int64_t k0 = next_seen_key_tile(t.ranges, rows, kKeys, t.ranges[0].begin);
    if (k0 < key_end) {
      sm90::copy_tile_async<D>(t.k[0], k + kv_at(s, b, k0, hk), kv_stride, kKeys, min64(kKeys, key_end - k0));
    }
    sm90::copies_commit();
    for (int buf = 0; k0 < key_end; buf ^= 1) {
      const std::int64_t kn = min64(kKeys, key_end - k0);
      sm90::copies_wait_all();  // this tile's K (and Q, at the first tile): nothing else is in flight
      sm90::fence_shared_for_wgmma();
      // Every thread's copies are visible after it, and every warp is past the previous tile's
      // products: its K buffer and Vᵀ may be overwritten.
      __syncthreads();

      // 1. The next tile's K, into the other buffer, while this one computes.
      const std::int64_t next = next_seen_key_tile(t.ranges, rows, kKeys, k0 + kKeys);
      if (next < key_end) {
        sm90::copy_tile_async<D>(t.k[buf ^ 1], k + kv_at(s, b, next, hk), kv_stride, kKeys,
                                 min64(kKeys, key_end - next));
      }
      sm90::copies_commit();

      // 2. S = Q·Kᵀ, and Vᵀ copied while it runs.
      float sc[32];
      sm90::warpgroup_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        // A k-step of 16 is two core matrices along K: 256 bytes on in both tiles.
        sm90::mma_m64n64k16_ss(sc, sm90::descriptor(t.q + kk * 128, kQkStride),
                               sm90::descriptor(t.k[buf] + kk * 128, kQkStride), kk > 0);
      }
      sm90::warpgroup_commit();
      sm90::copy_tile_transposed<D>(t.vt, v + kv_at(s, b, k0, hk), kv_stride, kn);
      sm90::fence_shared_for_wgmma();
      sm90::warpgroup_wait_all();
      sm90::fence_operands(sc);

      // 3. The online softmax of the thread's two rows (index r: row0 + 8r).
      float rescale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const sm90::VisibleColumns visible = sm90::visible_columns(range[r], k0, kn);
        float tile_max = neg_inf<float>();
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = sc[4 * j + 2 * r + c];
            x = visible.has(8 * j + 2 * quad + c) ? scale * x : neg_inf<float>();
            tile_max = fmaxf(tile_max, x);
          }
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_new = fmaxf(m[r], tile_max);
        // A row that has seen nothing yet keeps m = −inf, P = 0 and its accumulator.
        rescale[r] = m_new == neg_inf<float>() ? 1.0f : dev_exp(m[r] - m_new);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& x = sc[4 * j + 2 * r + c];
            x = x == neg_inf<float>() ? 0.0f : dev_exp(x - m_new);
            sum += x;
          }
        }
        l[r] = l[r] * rescale[r] + sum;
        m[r] = m_new;
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        acc[4 * j] *= rescale[0];
        acc[4 * j + 1] *= rescale[0];
        acc[4 * j + 2] *= rescale[1];
        acc[4 * j + 3] *= rescale[1];
      }

      __syncthreads();  // every thread's Vᵀ stores, before the products read them

      // 4. O += P·V, k-step c over keys 16c .. 16c + 15: the m16n8k16 A fragment of the warp's rows
      // is (row0, keys 2·quad + {0,1}), (row0 + 8, same), (row0, 8 + 2·quad + {0,1}), (row0 + 8,
      // same): the score registers of n-blocks 2c and 2c + 1.
      // Every fragment is packed before the first wgmma, so that no register the warpgroup's MMAs
      // use changes between them (ptxas would otherwise wait for the MMAs in flight at each).
      std::uint32_t p[kKeys / 16][4];
      sm90::pack_fragments(sc, p);
      sm90::fence_operands(acc);
      sm90::warpgroup_fence();
#pragma unroll
      for (int c = 0; c < kKeys / 16; ++c) {
        const std::uint64_t vt = sm90::descriptor(t.vt + c * 128, kVtStride);
        if constexpr (D == 64) {
          sm90::mma_m64n64k16_rs(acc, p[c], vt);
        } else {
          sm90::mma_m64n128k16_rs(acc, p[c], vt);
        }
      }
      sm90::warpgroup_commit();
      sm90::warpgroup_wait_all();
      sm90::fence_operands(acc);
      k0 = next;
    }
    sm90::copies_wait_all();  // Q's copy, when no key tile was visited

    // o = O / l and lse = m + log l, the row sums first reduced over the row's 4 threads.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const int row = row0 + 8 * r;
      if (row >= rows) continue;
      const bool seen = m[r] != neg_inf<float>();
      float* out = o + q_at(s, b, i0 + row, h);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const float2 pair = seen ? make_float2(acc[4 * j + 2 * r] / l[r], acc[4 * j + 2 * r + 1] / l[r])
                                 : make_float2(0.0f, 0.0f);
        *reinterpret_cast<float2*>(out + 8 * j + 2 * quad) = pair;
      }
      if (quad == 0) lse[lse_at(s, b, h, i0 + row)] = seen ? m[r] + dev_log(l[r]) : neg_inf<float>();
    }
  }
#endif
}

template <int D>
void launch(cudaStream_t stream, const AttentionShape& s, const Bf16* q, const Bf16* k, const Bf16* v, float* o,
            float* lse) {
  const std::int64_t tasks = (s.q_len + kRows - 1) / kRows * s.batch * s.heads;
  if (tasks == 0) return;
  constexpr std::int64_t kMaxGrid = std::int64_t{1} << 30;
  constexpr int bytes = static_cast<int>(sizeof(Tiles<D>));
  WF_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_sm90<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  attention_forward_sm90<D><<<static_cast<int>(tasks < kMaxGrid ? tasks : kMaxGrid), kThreads, bytes, stream>>>(
      s, tasks, q, k, v, o, lse);
  WF_CUDA_CHECK_LAUNCH("attention_forward_sm90");
}

}  // namespace

std::string sm90_attention_refusal(int device, const AttentionShape& shape, const void* q, const void* k,
                                   const void* v) {
  if (shape.head_dim != 64 && shape.head_dim != 128) return "head_dim is not 64 or 128";
  for (const void* p : {q, k, v})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return "q, k or v is not 16-byte aligned";
  int major = 0, minor = 0;
  WF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  WF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return "the GPU is not compute capability 9.0 (the kernel is sm_90a code)";
  return "";
}

void launch_attention_forward_sm90(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                                   const __nv_bfloat16* k, const __nv_bfloat16* v, float* o, float* lse) {
  if (shape.head_dim == 64) {
    launch<64>(stream, shape, q, k, v, o, lse);
  } else {
    launch<128>(stream, shape, q, k, v, o, lse);
  }
}

}  // namespace wf::kernels::cuda
