// The attention backward on Hopper's warpgroup MMA (attention.h says what it computes): the own
// WMMA backward's two kernels (attention.cu) with every product a wgmma and the scores, P, dP and
// dS in registers. After −D = d_lse − rowsum(dO∘O) per query row (attention_minus_delta's kernel):
//
//   dK/dV: one block (a warpgroup) per 64-key tile of a kv head owns the tile's dK and dV
//   accumulators [64 × d] in registers. For each query head of the GQA group and each 64-row
//   query tile that sees the keys (rows_seeing), in order:
//     Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ   (wgmma m64n64k16, K, V, Q, dO from shared memory)
//     Pᵀ = exp(scale·Sᵀ − lse) on the visible pairs, 0 elsewhere (and where lse = −inf)
//     dSᵀ = scale·Pᵀ∘(dPᵀ − D)
//     dV += Pᵀ·dO,  dK += dSᵀ·Q   (wgmma m64n{d}k16, Pᵀ and dSᵀ from registers as bf16, dO and Q
//                                  transposed in shared memory)
//   dQ: one block per 64-row query tile of a head owns its dQ [64 × d] in registers; for each key
//   tile the rows see: S = Q·Kᵀ and dP = dO·Vᵀ, P and dS as above, dQ += dS·K (Kᵀ in shared memory).
//
// Each output element has one writer summing in a fixed order: deterministic, no atomics. P and
// dS are f32 until they are rounded to bf16 for their products, as the CPU's bf16 kernel does.
// Copies overlap products as in the forward: the transposed tiles (Qᵀ, dOᵀ; Kᵀ) are written while
// the scores and their gradient are multiplied, and dQ's blocks copy the next key tile's K and V
// (cp.async, a second buffer) while this one computes. Register layouts, descriptors and what has
// not run: attention_forward.cu and wgmma.cuh.
#include <math.h>

#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/sm90/attention.h"
#include "kernels/cuda/sm90/tiles.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

using namespace attention_tiles;
using Bf16 = __nv_bfloat16;
using sm90::kThreads;
constexpr int kTile = sm90::kTileRows;  // keys per dK/dV block, query rows per dQ block, the other side's tile

// d/16 wgmma k-steps of acc [64 × 64] = A·Bᵀ, A and B [64 × D] K-major tiles in shared memory.
template <int D>
__device__ __forceinline__ void issue_rows_times_rows(float (&acc)[32], const Bf16* a, const Bf16* b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    sm90::mma_m64n64k16_ss(acc, sm90::descriptor(a + kk * 128, D * 16), sm90::descriptor(b + kk * 128, D * 16),
                           kk > 0);
  }
}

// x = A·Bᵀ and y = C·Dᵀ (all four [64 × D] K-major tiles in shared memory), issued together:
// a tile pair's scores and the gradient at them (S and dP, or Sᵀ and dPᵀ). They run while the
// warpgroup goes on (copying the operands of its next products); wait_for_products waits for them.
template <int D>
__device__ __forceinline__ void issue_scores_and_gradient(float (&x)[32], const Bf16* a, const Bf16* b, float (&y)[32],
                                                          const Bf16* c, const Bf16* d) {
  sm90::warpgroup_fence();
  issue_rows_times_rows<D>(x, a, b);
  issue_rows_times_rows<D>(y, c, d);
  sm90::warpgroup_commit();
}
// Waits for issue_scores_and_gradient's products: x and y hold them after it. (A template, as
// every device function here: the host pass, where the kernels' bodies are empty, uses none.)
template <int D>
__device__ __forceinline__ void wait_for_products(float (&x)[32], float (&y)[32]) {
  sm90::warpgroup_wait_all();
  sm90::fence_operands(x);
  sm90::fence_operands(y);
}

// 4 wgmma k-steps of acc [64 × D] += A·B, A the packed fragments of a 64 × 64 accumulator (64 k),
// B [64 × D] held transposed in shared memory ([D × 64] K-major).
template <int D>
__device__ __forceinline__ void issue_fragments_times_tile(float (&acc)[D / 2], const std::uint32_t (&a)[4][4],
                                                           const Bf16* transposed) {
  constexpr std::uint32_t kStride = kTile * 16;  // bytes between 8-row groups of the transposed tile
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const std::uint64_t b = sm90::descriptor(transposed + c * 128, kStride);
    if constexpr (D == 64) {
      sm90::mma_m64n64k16_rs(acc, a[c], b);
    } else {
      sm90::mma_m64n128k16_rs(acc, a[c], b);
    }
  }
}

// A 64-row slice of an f32 accumulator [64 × D] (rows row0 and row0 + 8 of this thread, columns
// 8j + 2·quad + {0, 1}) into rows [0, count) of out (row r at out + r·stride): written, or added.
template <int D>
__device__ void store_rows(const float (&acc)[D / 2], float* out, std::int64_t stride, std::int64_t count, int row0,
                           int quad, bool accumulate) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= count) continue;
    float* dst = out + row * stride;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float2 value = make_float2(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1]);
      float2* at = reinterpret_cast<float2*>(dst + 8 * j + 2 * quad);
      if (accumulate) {
        const float2 old = *at;
        value.x += old.x;
        value.y += old.y;
      }
      *at = value;
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = 0.0f;
}

// ---- dK, dV ---------------------------------------------------------------------------------------
template <int D>
struct KeyTiles {
  Bf16 k[kTile * D], v[kTile * D];      // the block's keys: the A operands of Sᵀ and dPᵀ
  Bf16 q[kTile * D], d_o[kTile * D];    // a query tile: the B operands of Sᵀ and dPᵀ
  Bf16 qt[D * kTile], d_ot[D * kTile];  // the same transposed: the B operands of dK and dV
  float lse[kTile], minus_delta[kTile];
  KeyRange ranges[kTile];  // the query tile's rows' key ranges
};

template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_sm90(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                                 const float* lse, const Bf16* d_o, const float* minus_delta, float* dk, float* dv,
                                 bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  KeyTiles<D>& t = *reinterpret_cast<KeyTiles<D>*>(smem_bytes);
  const int lane = threadIdx.x & 31, quad = lane & 3;
  const int row0 = 16 * (threadIdx.x >> 5) + (lane >> 2);  // this thread's key rows: row0 and row0 + 8
  const float scale = float(s.scale);
  const std::int64_t q_stride = s.heads * D, kv_stride = s.kv_heads * D, group = s.heads / s.kv_heads;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [j0, kn, b, hk] = key_tile(s, kTile, task);
    __syncthreads();  // the previous task is done with the tiles
    sm90::copy_tile_async<D>(t.k, k + kv_at(s, b, j0, hk), kv_stride, kTile, kn);
    sm90::copy_tile_async<D>(t.v, v + kv_at(s, b, j0, hk), kv_stride, kTile, kn);
    sm90::copies_commit();
    float dk_acc[D / 2], dv_acc[D / 2];
    zero(dk_acc);
    zero(dv_acc);
    const auto [first, last] = rows_seeing(s, b, j0, j0 + kn);
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = hk * group + g;
      for (std::int64_t i0 = first; i0 < last; i0 += kTile) {
        const std::int64_t rows = min64(kTile, last - i0);  // rows past `last` see none of the keys
        __syncthreads();  // the previous query tile's operands are read
        for (int r = threadIdx.x; r < kTile; r += kThreads) {
          const bool valid = r < rows;
          t.ranges[r] = valid ? attention_key_range(s, b, i0 + r) : KeyRange{};
          t.lse[r] = valid ? lse[lse_at(s, b, h, i0 + r)] : neg_inf<float>();
          t.minus_delta[r] = valid ? minus_delta[lse_at(s, b, h, i0 + r)] : 0.0f;
        }
        const Bf16* q_rows = q + q_at(s, b, i0, h);
        const Bf16* d_o_rows = d_o + q_at(s, b, i0, h);
        sm90::copy_tile_async<D>(t.q, q_rows, q_stride, kTile, rows);
        sm90::copy_tile_async<D>(t.d_o, d_o_rows, q_stride, kTile, rows);
        sm90::copies_commit();
        sm90::copies_wait_all();
        sm90::fence_shared_for_wgmma();
        __syncthreads();

        // Qᵀ and dOᵀ, which only the products at the end read, are copied while Sᵀ and dPᵀ are
        // multiplied.
        float st[32], dpt[32];  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ [64 keys × 64 queries]
        issue_scores_and_gradient<D>(st, t.k, t.q, dpt, t.v, t.d_o);
        sm90::copy_tile_transposed<D>(t.qt, q_rows, q_stride, rows);
        sm90::copy_tile_transposed<D>(t.d_ot, d_o_rows, q_stride, rows);
        sm90::fence_shared_for_wgmma();
        wait_for_products<D>(st, dpt);

        // Pᵀ into st, dSᵀ into dpt: key row0 + 8r, query column 8j + 2·quad + c (each column's
        // range, lse and −D read once for the thread's two keys).
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = 8 * j + 2 * quad + c;
            const KeyRange range = t.ranges[col];
            const float row_lse = t.lse[col], row_minus_delta = t.minus_delta[col];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int key = row0 + 8 * r, i = 4 * j + 2 * r + c;
              const bool seen = key < kn && sees(range, j0 + key) && row_lse != neg_inf<float>();
              const float p = seen ? dev_exp(scale * st[i] - row_lse) : 0.0f;
              st[i] = p;
              dpt[i] = scale * p * (dpt[i] + row_minus_delta);
            }
          }
        }
        std::uint32_t pt[4][4], dst[4][4];
        sm90::pack_fragments(st, pt);
        sm90::pack_fragments(dpt, dst);
        __syncthreads();  // every thread's Qᵀ and dOᵀ stores, before the products read them
        sm90::fence_operands(dv_acc);
        sm90::fence_operands(dk_acc);
        sm90::warpgroup_fence();
        issue_fragments_times_tile<D>(dv_acc, pt, t.d_ot);  // dV += Pᵀ·dO
        issue_fragments_times_tile<D>(dk_acc, dst, t.qt);   // dK += dSᵀ·Q
        sm90::warpgroup_commit();
        sm90::warpgroup_wait_all();
        sm90::fence_operands(dv_acc);
        sm90::fence_operands(dk_acc);
      }
    }
    sm90::copies_wait_all();  // K's and V's copies, when no query tile was visited
    store_rows<D>(dk_acc, dk + kv_at(s, b, j0, hk), kv_stride, kn, row0, quad, accumulate);
    store_rows<D>(dv_acc, dv + kv_at(s, b, j0, hk), kv_stride, kn, row0, quad, accumulate);
  }
#endif
}

// ---- dQ -------------------------------------------------------------------------------------------
// 113 KiB at d 128.
template <int D>
struct QueryTiles {
  Bf16 q[kTile * D], d_o[kTile * D];    // the block's rows: the A operands of S and dP
  Bf16 k[2][kTile * D], v[2][kTile * D];  // this key tile's and the next one's: the B operands of S and dP
  Bf16 kt[D * kTile];                   // K transposed: the B operand of dQ
  KeyRange ranges[kTile];
};

template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_sm90(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                               const float* lse, const Bf16* d_o, const float* minus_delta, float* dq,
                               bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  QueryTiles<D>& t = *reinterpret_cast<QueryTiles<D>*>(smem_bytes);
  const int lane = threadIdx.x & 31, quad = lane & 3;
  const int row0 = 16 * (threadIdx.x >> 5) + (lane >> 2);  // this thread's query rows: row0 and row0 + 8
  const float scale = float(s.scale);
  const std::int64_t q_stride = s.heads * D, kv_stride = s.kv_heads * D;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, kTile, task);
    __syncthreads();  // the previous task is done with the tiles
    load_key_ranges(s, b, i0, rows, kTile, t.ranges);
    sm90::copy_tile_async<D>(t.q, q + q_at(s, b, i0, h), q_stride, kTile, rows);
    sm90::copy_tile_async<D>(t.d_o, d_o + q_at(s, b, i0, h), q_stride, kTile, rows);
    sm90::copies_commit();
    __syncthreads();  // the ranges
    KeyRange range[2];
    float row_lse[2], row_minus_delta[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      range[r] = t.ranges[row];
      row_lse[r] = row < rows ? lse[lse_at(s, b, h, i0 + row)] : neg_inf<float>();
      row_minus_delta[r] = row < rows ? minus_delta[lse_at(s, b, h, i0 + row)] : 0.0f;
    }
    float dq_acc[D / 2];
    zero(dq_acc);

    // As the forward pipelines its tiles (attention_forward.cu): K and V of the next key tile
    // are copied while this one computes, Kᵀ while S and dP are multiplied.
    const std::int64_t key_end = t.ranges[rows - 1].end;
    std::int64_t k0 = next_seen_key_tile(t.ranges, rows, kTile, t.ranges[0].begin);
    const auto copy_keys = [&](int buf, std::int64_t first) {
      const std::int64_t count = min64(kTile, key_end - first);
      sm90::copy_tile_async<D>(t.k[buf], k + kv_at(s, b, first, hk), kv_stride, kTile, count);
      sm90::copy_tile_async<D>(t.v[buf], v + kv_at(s, b, first, hk), kv_stride, kTile, count);
    };
    if (k0 < key_end) copy_keys(0, k0);
    sm90::copies_commit();
    for (int buf = 0; k0 < key_end; buf ^= 1) {
      const std::int64_t kn = min64(kTile, key_end - k0);
      sm90::copies_wait_all();  // this tile's K and V (and Q and dO, at the first tile)
      sm90::fence_shared_for_wgmma();
      __syncthreads();  // every thread's copies visible; every warp past the previous tile's products
      const std::int64_t next = next_seen_key_tile(t.ranges, rows, kTile, k0 + kTile);
      if (next < key_end) copy_keys(buf ^ 1, next);
      sm90::copies_commit();

      float sc[32], dp[32];  // S = Q·Kᵀ and dP = dO·Vᵀ [64 rows × 64 keys]
      issue_scores_and_gradient<D>(sc, t.q, t.k[buf], dp, t.d_o, t.v[buf]);
      sm90::copy_tile_transposed<D>(t.kt, k + kv_at(s, b, k0, hk), kv_stride, kn);
      sm90::fence_shared_for_wgmma();
      wait_for_products<D>(sc, dp);

      // dS into dp: row row0 + 8r, key column 8j + 2·quad + c.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const sm90::VisibleColumns visible = sm90::visible_columns(range[r], k0, kn);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int i = 4 * j + 2 * r + c;
            const bool seen = visible.has(8 * j + 2 * quad + c) && row_lse[r] != neg_inf<float>();
            const float p = seen ? dev_exp(scale * sc[i] - row_lse[r]) : 0.0f;
            dp[i] = scale * p * (dp[i] + row_minus_delta[r]);
          }
        }
      }
      std::uint32_t ds[4][4];
      sm90::pack_fragments(dp, ds);
      __syncthreads();  // every thread's Kᵀ stores, before the product reads them
      sm90::fence_operands(dq_acc);
      sm90::warpgroup_fence();
      issue_fragments_times_tile<D>(dq_acc, ds, t.kt);  // dQ += dS·K
      sm90::warpgroup_commit();
      sm90::warpgroup_wait_all();
      sm90::fence_operands(dq_acc);
      k0 = next;
    }
    sm90::copies_wait_all();  // Q's and dO's copies, when no key tile was visited
    store_rows<D>(dq_acc, dq + q_at(s, b, i0, h), q_stride, rows, row0, quad, accumulate);
  }
#endif
}

template <class Kernel, class... Args>
void launch_blocks(Kernel kernel, const char* name, cudaStream_t stream, std::int64_t tasks, int bytes,
                   Args... args) {
  if (tasks == 0) return;
  constexpr std::int64_t kMaxGrid = std::int64_t{1} << 30;
  WF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<static_cast<int>(tasks < kMaxGrid ? tasks : kMaxGrid), kThreads, bytes, stream>>>(args...);
  WF_CUDA_CHECK_LAUNCH(name);
}

template <int D>
void backward(cudaStream_t stream, const AttentionShape& s, const Bf16* q, const Bf16* k, const Bf16* v,
              const float* lse, const Bf16* d_o, const float* minus_delta, float* dq, float* dk, float* dv,
              bool accumulate) {
  const std::int64_t kv_tasks = (s.kv_len + kTile - 1) / kTile * s.batch * s.kv_heads;
  launch_blocks(attention_backward_dkdv_sm90<D>, "attention_backward_dkdv_sm90", stream, kv_tasks,
                static_cast<int>(sizeof(KeyTiles<D>)), s, kv_tasks, q, k, v, lse, d_o, minus_delta, dk, dv,
                accumulate);
  const std::int64_t q_tasks = (s.q_len + kTile - 1) / kTile * s.batch * s.heads;
  launch_blocks(attention_backward_dq_sm90<D>, "attention_backward_dq_sm90", stream, q_tasks,
                static_cast<int>(sizeof(QueryTiles<D>)), s, q_tasks, q, k, v, lse, d_o, minus_delta, dq, accumulate);
}

}  // namespace

void launch_attention_backward_sm90(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                                    const __nv_bfloat16* k, const __nv_bfloat16* v, const float* o,
                                    const float* lse, const __nv_bfloat16* d_o, float* dq, float* dk, float* dv,
                                    bool accumulate, const float* d_lse, float* minus_delta) {
  launch_attention_minus_delta<__nv_bfloat16, float>(stream, shape.batch, shape.q_len, shape.heads, shape.head_dim,
                                                     d_o, o, d_lse, minus_delta);
  if (shape.head_dim == 64) {
    backward<64>(stream, shape, q, k, v, lse, d_o, minus_delta, dq, dk, dv, accumulate);
  } else {
    backward<128>(stream, shape, q, k, v, lse, d_o, minus_delta, dq, dk, dv, accumulate);
  }
}

}  // namespace wf::kernels::cuda
