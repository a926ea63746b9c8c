// Flash attention on CUDA: the forward (online softmax over key tiles, o and lse) and the
// backward (dK/dV per key tile, dQ per query tile), with the CPU kernel's semantics
// (kernels/cpu/attention.h): causal masks at global positions, GQA without copying K/V, a row
// that sees no key gets o = 0, lse = −inf and zero gradients.
//
// The plain kernels (SIMT) serve every operand type: a block of kBlockThreads threads owns a
// tile of `tile` rows and streams the other side's tiles through shared memory, where every
// operand is widened to the accumulation type Acc (f32 for f32 and bf16, f64 for f64). bf16
// operands round P and dS to bf16 before their products, as the CPU's bf16 kernel does. Each
// output element has one writer that sums in a fixed order: the results are deterministic.
// bf16 operands with head_dim a multiple of 16 (up to 128) run the forward and the backward on
// tensor cores instead (WMMA, below).
// Design notes: docs/kernels-attention.md ("CUDA attention").
#include <math.h>
#include <mma.h>

#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

constexpr int kBlockThreads = 128;
// Shared memory a SIMT block may take: the tile shrinks (32, 16, 8 rows) until it fits. 99 KiB is
// the smallest opt-in limit of the GPUs that run the sm_80 code (sm_86 and sm_89; sm_80 allows
// 163 KiB, sm_90 227 KiB), and enough for f64 at head_dim 256 with 8-row tiles (97 KiB).
constexpr std::int64_t kMaxSharedBytes = 99 * 1024;


// A product operand as the CPU kernel multiplies it: bf16 operands round P and dS to bf16.
template <class In, class Acc>
__device__ __forceinline__ Acc as_operand(Acc x) {
  if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    return __bfloat162float(__float2bfloat16(x));
  } else {
    return x;
  }
}

template <class Acc, class In>
__device__ __forceinline__ Acc widen(In x) {
  return Acc(to_float(x));
}

using namespace attention_tiles;  // attention_tiles.cuh: the tiles' geometry

// Rows [0, count) of a tile (row r at src + r·stride, head_dim elements) into shared memory as
// Acc, rows [count, tile) zero: padding rows multiply as zeros, never as stale data.
template <class Acc, class In>
__device__ void load_rows(Acc* dst, const In* src, std::int64_t stride, int tile, std::int64_t count,
                          std::int64_t d) {
  for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) {
    const std::int64_t r = e / d, c = e % d;
    dst[e] = r < count ? widen<Acc>(src[r * stride + c]) : Acc(0);
  }
}

template <class Acc>
__device__ Acc dot_rows(const Acc* x, const Acc* y, std::int64_t d) {
  Acc sum = 0;
  for (std::int64_t c = 0; c < d; ++c) sum += x[c] * y[c];
  return sum;
}

// ---- forward (SIMT) -----------------------------------------------------------------------------
// Task t of q_tiles·batch·heads: query tile (last first: under a causal mask they see the most
// keys) of head (b, h). Shared: the rows' key ranges [tile]; Q, K, V, O accumulator [tile, d];
// scores [tile, tile]; row max, row sum and rescale [tile].
template <class In, class Acc>
__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_simt(AttentionShape s, int tile, std::int64_t tasks, const In* q, const In* k, const In* v,
                           Acc* o, Acc* lse) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const std::int64_t d = s.head_dim;
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Acc* qs = reinterpret_cast<Acc*>(ranges + tile);
  Acc* ks = qs + tile * d;
  Acc* vs = ks + tile * d;
  Acc* acc = vs + tile * d;
  Acc* sc = acc + tile * d;
  Acc* m = sc + tile * tile;
  Acc* l = m + tile;
  Acc* alpha = l + tile;
  const Acc scale = Acc(s.scale);
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, tile, task);
    __syncthreads();  // the previous task's output reads are done
    load_key_ranges(s, b, i0, rows, tile, ranges);
    load_rows(qs, q + q_at(s, b, i0, h), q_stride, tile, rows, d);
    for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) acc[e] = 0;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
      m[r] = neg_inf<Acc>();
      l[r] = 0;
    }
    __syncthreads();
    for_each_seen_key_tile(ranges, rows, tile, [&](std::int64_t k0, std::int64_t kn) {
      load_rows(ks, k + kv_at(s, b, k0, hk), kv_stride, tile, kn, d);
      load_rows(vs, v + kv_at(s, b, k0, hk), kv_stride, tile, kn, d);
      __syncthreads();
      for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
        const int r = e / tile, j = e % tile;
        const bool seen = r < rows && j < kn && sees(ranges[r], k0 + j);
        sc[e] = seen ? scale * dot_rows(qs + r * d, ks + j * d, d) : neg_inf<Acc>();
      }
      __syncthreads();
      // Online softmax, one thread per row: the tile's scores become P = exp(s − m_new).
      for (int r = threadIdx.x; r < tile; r += blockDim.x) {
        Acc* row = sc + r * tile;
        Acc tile_max = neg_inf<Acc>();
        for (int j = 0; j < tile; ++j) tile_max = row[j] > tile_max ? row[j] : tile_max;
        if (tile_max == neg_inf<Acc>()) {  // nothing visible in this tile: contributes nothing
          for (int j = 0; j < tile; ++j) row[j] = 0;
          alpha[r] = 1;
          continue;
        }
        const Acc m_new = m[r] > tile_max ? m[r] : tile_max;
        const Acc rescale = dev_exp(m[r] - m_new);  // m[r] = −inf (first visible tile) → 0
        Acc sum = 0;
        for (int j = 0; j < tile; ++j) {
          const Acc p = row[j] == neg_inf<Acc>() ? Acc(0) : dev_exp(row[j] - m_new);
          sum += p;
          row[j] = as_operand<In>(p);
        }
        l[r] = l[r] * rescale + sum;
        m[r] = m_new;
        alpha[r] = rescale;
      }
      __syncthreads();
      for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) {
        const std::int64_t r = e / d, c = e % d;
        Acc x = acc[e] * alpha[r];
        for (int j = 0; j < kn; ++j) x += sc[r * tile + j] * vs[j * d + c];
        acc[e] = x;
      }
    });
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const std::int64_t r = e / d, c = e % d;
      // No visible key: o = 0 by definition (acc is 0 and l is 0 there).
      o[q_at(s, b, i0 + r, h) + c] = m[r] == neg_inf<Acc>() ? Acc(0) : acc[e] / l[r];
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x)
      lse[lse_at(s, b, h, i0 + r)] = m[r] == neg_inf<Acc>() ? neg_inf<Acc>() : m[r] + dev_log(l[r]);
  }
}

// ---- backward (SIMT) ----------------------------------------------------------------------------
// P and dS of a query tile's rows [0, rows) (their key ranges in `ranges`) against the key tile
// [j0, j0 + kn) held in ks, vs: p = exp(scale·q·k − lse) on visible entries, else 0 (also for rows
// whose lse is −inf), and dS = scale·P∘(dP − D) with dP = dO·Vᵀ and md = −D. Both stored as their
// products' operands.
template <class In, class Acc>
__device__ void probabilities_and_ds(const AttentionShape& s, int tile, const KeyRange* ranges, std::int64_t rows,
                                     std::int64_t j0, std::int64_t kn, const Acc* qs, const Acc* dos,
                                     const Acc* ks, const Acc* vs, const Acc* lse_s, const Acc* md_s, Acc* ps,
                                     Acc* dss) {
  const std::int64_t d = s.head_dim;
  const Acc scale = Acc(s.scale);
  for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
    const int r = e / tile, j = e % tile;
    Acc p = 0, ds = 0;
    if (r < rows && j < kn && sees(ranges[r], j0 + j) && lse_s[r] != neg_inf<Acc>()) {
      p = dev_exp(scale * dot_rows(qs + r * d, ks + j * d, d) - lse_s[r]);
      ds = scale * p * (dot_rows(dos + r * d, vs + j * d, d) + md_s[r]);
    }
    if (ps != nullptr) ps[e] = as_operand<In>(p);
    dss[e] = as_operand<In>(ds);
  }
}

// Loads a query tile's key ranges, lse and −D rows: padding rows see no key and read as −inf (no
// probability) and 0.
template <class Acc>
__device__ void load_row_stats(const AttentionShape& s, std::int64_t b, std::int64_t h, std::int64_t i0,
                               std::int64_t rows, int tile, const Acc* lse, const Acc* minus_delta,
                               KeyRange* ranges, Acc* lse_s, Acc* md_s) {
  load_key_ranges(s, b, i0, rows, tile, ranges);
  for (int r = threadIdx.x; r < tile; r += blockDim.x) {
    lse_s[r] = r < rows ? lse[lse_at(s, b, h, i0 + r)] : neg_inf<Acc>();
    md_s[r] = r < rows ? minus_delta[lse_at(s, b, h, i0 + r)] : Acc(0);
  }
}

// Task t of kv_tiles·batch·kv_heads: key tile [j0, j0 + kn) of kv head (b, hk), which owns its
// dK/dV rows and sums them over the group's query heads and every query tile of the rows that see
// it, in a fixed order. Shared: the query rows' key ranges [tile]; K, V, dK, dV, Q, dO [tile, d];
// P, dS [tile, tile]; lse, −D [tile].
template <class In, class Acc>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dkdv_simt(AttentionShape s, int tile, std::int64_t tasks, const In* q, const In* k,
                                 const In* v, const Acc* lse, const In* d_o, const Acc* minus_delta, Acc* dk,
                                 Acc* dv, bool accumulate) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const std::int64_t d = s.head_dim;
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Acc* ks = reinterpret_cast<Acc*>(ranges + tile);
  Acc* vs = ks + tile * d;
  Acc* dks = vs + tile * d;
  Acc* dvs = dks + tile * d;
  Acc* qs = dvs + tile * d;
  Acc* dos = qs + tile * d;
  Acc* ps = dos + tile * d;
  Acc* dss = ps + tile * tile;
  Acc* lse_s = dss + tile * tile;
  Acc* md_s = lse_s + tile;
  const std::int64_t group = s.heads / s.kv_heads;
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [j0, kn, b, hk] = key_tile(s, tile, task);
    __syncthreads();  // the previous task's output reads are done
    load_rows(ks, k + kv_at(s, b, j0, hk), kv_stride, tile, kn, d);
    load_rows(vs, v + kv_at(s, b, j0, hk), kv_stride, tile, kn, d);
    for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) {
      dks[e] = 0;
      dvs[e] = 0;
    }
    // Only the query rows that see some of these keys (without windows: from the first that
    // sees j0 to the end).
    const RowRun run = rows_seeing(s, b, j0, j0 + kn);
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = hk * group + g;
      for (std::int64_t i0 = run.first; i0 < run.last; i0 += tile) {
        const std::int64_t rows = min64(tile, run.last - i0);
        __syncthreads();  // the previous query tile's reads are done
        load_rows(qs, q + q_at(s, b, i0, h), q_stride, tile, rows, d);
        load_rows(dos, d_o + q_at(s, b, i0, h), q_stride, tile, rows, d);
        load_row_stats(s, b, h, i0, rows, tile, lse, minus_delta, ranges, lse_s, md_s);
        __syncthreads();
        probabilities_and_ds<In>(s, tile, ranges, rows, j0, kn, qs, dos, ks, vs, lse_s, md_s, ps, dss);
        __syncthreads();
        // dV += Pᵀ·dO, dK += dSᵀ·Q (padding rows have P = dS = 0).
        for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) {
          const std::int64_t j = e / d, c = e % d;
          Acc x_v = dvs[e], x_k = dks[e];
          for (int r = 0; r < rows; ++r) {
            x_v += ps[r * tile + j] * dos[r * d + c];
            x_k += dss[r * tile + j] * qs[r * d + c];
          }
          dvs[e] = x_v;
          dks[e] = x_k;
        }
      }
    }
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < kn * d; e += blockDim.x) {
      const std::int64_t j = e / d, c = e % d;
      const std::int64_t at = kv_at(s, b, j0 + j, hk) + c;
      dk[at] = accumulate ? dk[at] + dks[e] : dks[e];
      dv[at] = accumulate ? dv[at] + dvs[e] : dvs[e];
    }
  }
}

// Task t of q_tiles·batch·heads: query tile [i0, i0 + rows) of head (b, h) owns its dQ rows,
// summed over the key tiles it sees in order. Shared: the rows' key ranges [tile]; Q, dO, dQ, K, V
// [tile, d]; dS [tile, tile]; lse, −D [tile].
template <class In, class Acc>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dq_simt(AttentionShape s, int tile, std::int64_t tasks, const In* q, const In* k,
                               const In* v, const Acc* lse, const In* d_o, const Acc* minus_delta, Acc* dq,
                               bool accumulate) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const std::int64_t d = s.head_dim;
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Acc* qs = reinterpret_cast<Acc*>(ranges + tile);
  Acc* dos = qs + tile * d;
  Acc* dqs = dos + tile * d;
  Acc* ks = dqs + tile * d;
  Acc* vs = ks + tile * d;
  Acc* dss = vs + tile * d;
  Acc* lse_s = dss + tile * tile;
  Acc* md_s = lse_s + tile;
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, tile, task);
    __syncthreads();  // the previous task's output reads are done
    load_rows(qs, q + q_at(s, b, i0, h), q_stride, tile, rows, d);
    load_rows(dos, d_o + q_at(s, b, i0, h), q_stride, tile, rows, d);
    load_row_stats(s, b, h, i0, rows, tile, lse, minus_delta, ranges, lse_s, md_s);
    for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) dqs[e] = 0;
    __syncthreads();
    for_each_seen_key_tile(ranges, rows, tile, [&](std::int64_t j0, std::int64_t kn) {
      load_rows(ks, k + kv_at(s, b, j0, hk), kv_stride, tile, kn, d);
      load_rows(vs, v + kv_at(s, b, j0, hk), kv_stride, tile, kn, d);
      __syncthreads();
      probabilities_and_ds<In, Acc>(s, tile, ranges, rows, j0, kn, qs, dos, ks, vs, lse_s, md_s, nullptr, dss);
      __syncthreads();
      for (std::int64_t e = threadIdx.x; e < tile * d; e += blockDim.x) {  // dQ += dS·K
        const std::int64_t r = e / d, c = e % d;
        Acc x = dqs[e];
        for (int j = 0; j < kn; ++j) x += dss[r * tile + j] * ks[j * d + c];
        dqs[e] = x;
      }
    });
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const std::int64_t r = e / d, c = e % d;
      const std::int64_t at = q_at(s, b, i0 + r, h) + c;
      dq[at] = accumulate ? dq[at] + dqs[e] : dqs[e];
    }
  }
}

// ---- forward on tensor cores (bf16, WMMA) -------------------------------------------------------
// The SIMT forward's algorithm with Q·Kᵀ and P·V on tensor cores: 16×16×16 bf16 fragments with
// f32 accumulation. Each of the block's kWmmaWarps warps owns 16 query rows of a 64-row tile;
// key tiles of kWmmaKeys rows pass through shared memory. A warp's scores and its rows of the
// O accumulator stay in shared memory (f32), where the online softmax reads and rescales them
// row by row (a fragment's element layout is opaque). P is rounded to bf16 for its product, as
// the CPU's bf16 kernel does. head_dim: a multiple of 16, at most kWmmaMaxHeadDim.
constexpr int kWmmaWarps = kBlockThreads / 32;
constexpr int kWmmaRows = 16 * kWmmaWarps;
constexpr int kWmmaKeys = 32;  // one key per lane in the softmax
constexpr std::int64_t kWmmaMaxHeadDim = 128;
using Bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

// Rows [0, count) of a bf16 tile (row r at src + r·stride, d elements) into shared memory as they
// are, rows [count, tile) zero: padding rows multiply as zeros, never as stale data.
__device__ void copy_rows_bf16(Bf16* dst, const Bf16* src, std::int64_t stride, int tile, std::int64_t count, int d) {
  const Bf16 zero = __float2bfloat16(0.0f);
  for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    dst[e] = r < count ? src[r * stride + c] : zero;
  }
}

// One warp: out [16, kWmmaKeys] (f32, leading dimension kWmmaKeys) = A·Bᵀ for A the warp's 16 rows
// [16, d] and B a key tile [kWmmaKeys, d], both row-major bf16 in shared memory (B row-major is Bᵀ
// column-major): the scores S = Q·Kᵀ and dP = dO·Vᵀ.
__device__ void warp_rows_times_keys(const Bf16* a, const Bf16* b, int d, float* out) {
  for (int n0 = 0; n0 < kWmmaKeys; n0 += 16) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int kk = 0; kk < d; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, a + kk, d);
      wmma::load_matrix_sync(fb, b + n0 * d + kk, d);
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(out + n0, c, kWmmaKeys, wmma::mem_row_major);
  }
}

// One warp: the 16×16 tile out (f32 in shared memory, leading dimension ldo) += A·B over an inner
// size k (a multiple of 16), B row-major bf16 with leading dimension ldb. A is bf16 [16, k] stored
// row-major (ALayout row_major, A at a[i·lda + j]) or a transpose stored row-major (col_major, A at
// a[i + j·lda]: Pᵀ and dSᵀ read from P and dS).
template <class ALayout>
__device__ void warp_accumulate(float* out, int ldo, const Bf16* a, int lda, const Bf16* b, int ldb, int k) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(c, out, ldo, wmma::mem_row_major);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, ALayout> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, a + (std::is_same_v<ALayout, wmma::row_major> ? kk : kk * lda), lda);
    wmma::load_matrix_sync(fb, b + kk * ldb, ldb);
    wmma::mma_sync(c, fa, fb, c);
  }
  wmma::store_matrix_sync(out, c, ldo, wmma::mem_row_major);
}

// Shared memory of the WMMA forward: the rows' key ranges [rows]; Q [rows, d], K, V [keys, d] and
// P [rows, keys] in bf16; scores [rows, keys], the O accumulator [rows, d], row max, sum and
// rescale [rows] in f32. Every region's size is a multiple of 32 bytes (d % 16 == 0), so
// fragments stay aligned.
constexpr std::int64_t wmma_forward_bytes(std::int64_t d) {
  return std::int64_t{sizeof(KeyRange)} * kWmmaRows + 2 * ((kWmmaRows + 2 * kWmmaKeys) * d + kWmmaRows * kWmmaKeys) +
         4 * (kWmmaRows * kWmmaKeys + kWmmaRows * d + 3 * kWmmaRows);
}
static_assert(wmma_forward_bytes(kWmmaMaxHeadDim) <= kMaxSharedBytes, "the WMMA forward's tiles outgrow the opt-in");

__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_wmma(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                           float* o, float* lse) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const int d = static_cast<int>(s.head_dim);
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Bf16* qs = reinterpret_cast<Bf16*>(ranges + kWmmaRows);
  Bf16* ks = qs + kWmmaRows * d;
  Bf16* vs = ks + kWmmaKeys * d;
  Bf16* ps = vs + kWmmaKeys * d;
  float* sc = reinterpret_cast<float*>(ps + kWmmaRows * kWmmaKeys);
  float* acc = sc + kWmmaRows * kWmmaKeys;
  float* m = acc + kWmmaRows * d;
  float* l = m + kWmmaRows;
  float* alpha = l + kWmmaRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = 16 * warp;  // the warp's first row in the tile
  const float scale = float(s.scale);
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, kWmmaRows, task);
    __syncthreads();  // the previous task's output reads are done
    load_key_ranges(s, b, i0, rows, kWmmaRows, ranges);
    copy_rows_bf16(qs, q + q_at(s, b, i0, h), q_stride, kWmmaRows, rows, d);
    for (int e = threadIdx.x; e < kWmmaRows * d; e += blockDim.x) acc[e] = 0;
    for (int r = threadIdx.x; r < kWmmaRows; r += blockDim.x) {
      m[r] = neg_inf<float>();
      l[r] = 0;
    }
    __syncthreads();
    for_each_seen_key_tile(ranges, rows, kWmmaKeys, [&](std::int64_t k0, std::int64_t kn) {
      copy_rows_bf16(ks, k + kv_at(s, b, k0, hk), kv_stride, kWmmaKeys, kn, d);
      copy_rows_bf16(vs, v + kv_at(s, b, k0, hk), kv_stride, kWmmaKeys, kn, d);
      __syncthreads();
      warp_rows_times_keys(qs + row0 * d, ks, d, sc + row0 * kWmmaKeys);  // the warp's scores Q·Kᵀ
      __syncwarp();
      // Online softmax of the warp's rows, lane j on key k0 + j (the branches are warp-uniform).
      for (int r = row0; r < row0 + 16; ++r) {
        const bool seen = r < rows && lane < kn && sees(ranges[r], k0 + lane);
        const float x = seen ? scale * sc[r * kWmmaKeys + lane] : neg_inf<float>();
        const float tile_max = warp_max(x);
        float p = 0, rescale = 1;  // a row with nothing visible here: P = 0, O unchanged
        if (tile_max != neg_inf<float>()) {
          const float m_old = m[r];
          const float m_new = m_old > tile_max ? m_old : tile_max;
          rescale = dev_exp(m_old - m_new);  // m_old = −inf (first visible tile) → 0
          p = seen ? dev_exp(x - m_new) : 0.0f;
          const float sum = warp_sum(p);
          // A shuffle orders no memory: every lane's read of m[r] must precede lane 0's write
          // (the branch is warp-uniform, so the whole warp reaches this barrier).
          __syncwarp();
          if (lane == 0) {
            l[r] = l[r] * rescale + sum;
            m[r] = m_new;
          }
        }
        ps[r * kWmmaKeys + lane] = __float2bfloat16(p);
        if (lane == 0) alpha[r] = rescale;
      }
      __syncwarp();
      for (int e = lane; e < 16 * d; e += 32) acc[row0 * d + e] *= alpha[row0 + e / d];
      __syncwarp();
      // The warp's O rows [16, d] += P·V.
      for (int n0 = 0; n0 < d; n0 += 16)
        warp_accumulate<wmma::row_major>(acc + row0 * d + n0, d, ps + row0 * kWmmaKeys, kWmmaKeys, vs + n0, d,
                                         kWmmaKeys);
    });
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const std::int64_t r = e / d, c = e % d;
      o[q_at(s, b, i0 + r, h) + c] = m[r] == neg_inf<float>() ? 0.0f : acc[e] / l[r];
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x)
      lse[lse_at(s, b, h, i0 + r)] = m[r] == neg_inf<float>() ? neg_inf<float>() : m[r] + dev_log(l[r]);
  }
}

// ---- backward on tensor cores (bf16, WMMA) ------------------------------------------------------
// The SIMT backward's two kernels with every product on tensor cores (16×16×16 bf16 fragments,
// f32 accumulation): S = Q·Kᵀ and dP = dO·Vᵀ per warp of 16 query rows, then dV += Pᵀ·dO and
// dK += dSᵀ·Q (dK/dV kernel) or dQ += dS·K (dQ kernel). Query tiles of kWmmaRows rows and key
// tiles of kWmmaKeys keys, as in the forward; the scores, P and dS pass through shared memory,
// where each warp computes its rows' P = exp(scale·s − lse) and dS = scale·P∘(dP − D) lane by key
// and rounds both to bf16 for their products, as the CPU's bf16 kernel does (P and dS stay f32
// until then). Accumulators are f32 in shared memory; each 16×16 tile of them has one warp that
// adds into it in a fixed order: deterministic, like the SIMT kernels.

// One warp, its 16 rows [row0, row0 + 16) of the query tile against the key tile [k0, k0 + kn)
// (lane j on key k0 + j): P and dS from the scores S = Q·Kᵀ in sc, which it overwrites with
// dP = dO_w·Vᵀ on the way. Masked entries and rows with lse = −inf get P = dS = 0. P is written
// to ps when not null; dS to dss; both bf16 [rows, kWmmaKeys].
__device__ void warp_probabilities_and_ds(const AttentionShape& s, int row0, std::int64_t rows, std::int64_t k0,
                                          std::int64_t kn, const KeyRange* ranges, const float* lse_s,
                                          const float* md_s, const Bf16* dos, const Bf16* vs, float* sc, Bf16* ps,
                                          Bf16* dss) {
  const int lane = threadIdx.x & 31, d = static_cast<int>(s.head_dim);
  const float scale = float(s.scale);
  const auto seen = [&](int r) {
    return r < rows && lane < kn && sees(ranges[r], k0 + lane) && lse_s[r] != neg_inf<float>();
  };
  float p[16];
#pragma unroll
  for (int rr = 0; rr < 16; ++rr) {
    const int r = row0 + rr;
    p[rr] = seen(r) ? dev_exp(scale * sc[r * kWmmaKeys + lane] - lse_s[r]) : 0.0f;
    if (ps != nullptr) ps[r * kWmmaKeys + lane] = __float2bfloat16(p[rr]);
  }
  __syncwarp();  // every lane has read its scores before dP overwrites them
  warp_rows_times_keys(dos + row0 * d, vs, d, sc + row0 * kWmmaKeys);
  __syncwarp();
#pragma unroll
  for (int rr = 0; rr < 16; ++rr) {
    const int r = row0 + rr;
    const float ds = seen(r) ? scale * p[rr] * (sc[r * kWmmaKeys + lane] + md_s[r]) : 0.0f;
    dss[r * kWmmaKeys + lane] = __float2bfloat16(ds);
  }
}

// Shared memory of the WMMA dK/dV kernel: the query rows' key ranges [rows]; Q, dO [rows, d],
// K, V [keys, d], P, dS [rows, keys] in bf16; the dK, dV accumulators [keys, d], the scores
// [rows, keys], lse and −D [rows] in f32. Every region a multiple of 32 bytes, as the forward's.
constexpr std::int64_t wmma_dkdv_bytes(std::int64_t d) {
  return std::int64_t{sizeof(KeyRange)} * kWmmaRows +
         2 * (2 * kWmmaRows * d + 2 * kWmmaKeys * d + 2 * kWmmaRows * kWmmaKeys) +
         4 * (2 * kWmmaKeys * d + kWmmaRows * kWmmaKeys + 2 * kWmmaRows);
}
static_assert(wmma_dkdv_bytes(kWmmaMaxHeadDim) <= kMaxSharedBytes, "the WMMA dK/dV tiles outgrow the opt-in");

// Task t of kv_tiles·batch·kv_heads: key tile [j0, j0 + kn) of kv head (b, hk), as the SIMT
// dK/dV kernel: summed over the group's query heads and the query tiles of the rows that see it.
// The 16×16 tiles of dK and dV are dealt to the warps round-robin, the same way for every query
// tile, so each has one writer.
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dkdv_wmma(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                                 const float* lse, const Bf16* d_o, const float* minus_delta, float* dk, float* dv,
                                 bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const int d = static_cast<int>(s.head_dim);
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Bf16* qs = reinterpret_cast<Bf16*>(ranges + kWmmaRows);
  Bf16* dos = qs + kWmmaRows * d;
  Bf16* ks = dos + kWmmaRows * d;
  Bf16* vs = ks + kWmmaKeys * d;
  Bf16* ps = vs + kWmmaKeys * d;
  Bf16* dss = ps + kWmmaRows * kWmmaKeys;
  float* dks = reinterpret_cast<float*>(dss + kWmmaRows * kWmmaKeys);
  float* dvs = dks + kWmmaKeys * d;
  float* sc = dvs + kWmmaKeys * d;
  float* lse_s = sc + kWmmaRows * kWmmaKeys;
  float* md_s = lse_s + kWmmaRows;
  const int warp = threadIdx.x >> 5;
  const int row0 = 16 * warp;  // the warp's first row in the query tile
  const int col_tiles = d / 16, out_tiles = (kWmmaKeys / 16) * col_tiles;  // 16×16 tiles of dK (and of dV)
  const std::int64_t group = s.heads / s.kv_heads;
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [j0, kn, b, hk] = key_tile(s, kWmmaKeys, task);
    __syncthreads();  // the previous task's output reads are done
    copy_rows_bf16(ks, k + kv_at(s, b, j0, hk), kv_stride, kWmmaKeys, kn, d);
    copy_rows_bf16(vs, v + kv_at(s, b, j0, hk), kv_stride, kWmmaKeys, kn, d);
    for (int e = threadIdx.x; e < kWmmaKeys * d; e += blockDim.x) {
      dks[e] = 0;
      dvs[e] = 0;
    }
    const RowRun run = rows_seeing(s, b, j0, j0 + kn);
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = hk * group + g;
      for (std::int64_t i0 = run.first; i0 < run.last; i0 += kWmmaRows) {
        const std::int64_t rows = min64(kWmmaRows, run.last - i0);
        __syncthreads();  // every warp is done with the previous query tile
        copy_rows_bf16(qs, q + q_at(s, b, i0, h), q_stride, kWmmaRows, rows, d);
        copy_rows_bf16(dos, d_o + q_at(s, b, i0, h), q_stride, kWmmaRows, rows, d);
        load_row_stats(s, b, h, i0, rows, kWmmaRows, lse, minus_delta, ranges, lse_s, md_s);
        __syncthreads();
        warp_rows_times_keys(qs + row0 * d, ks, d, sc + row0 * kWmmaKeys);  // the warp's scores Q·Kᵀ
        __syncwarp();
        warp_probabilities_and_ds(s, row0, rows, j0, kn, ranges, lse_s, md_s, dos, vs, sc, ps, dss);
        __syncthreads();  // every warp's rows of P and dS are written
        // dV += Pᵀ·dO and dK += dSᵀ·Q over the whole tile (padding rows: P = dS = 0, zero Q, dO).
        for (int f = warp; f < out_tiles; f += kWmmaWarps) {
          const int key0 = 16 * (f / col_tiles), n0 = 16 * (f % col_tiles);
          warp_accumulate<wmma::col_major>(dvs + key0 * d + n0, d, ps + key0, kWmmaKeys, dos + n0, d, kWmmaRows);
          warp_accumulate<wmma::col_major>(dks + key0 * d + n0, d, dss + key0, kWmmaKeys, qs + n0, d, kWmmaRows);
        }
      }
    }
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < kn * d; e += blockDim.x) {
      const std::int64_t j = e / d, c = e % d;
      const std::int64_t at = kv_at(s, b, j0 + j, hk) + c;
      dk[at] = accumulate ? dk[at] + dks[e] : dks[e];
      dv[at] = accumulate ? dv[at] + dvs[e] : dvs[e];
    }
  }
}

// Shared memory of the WMMA dQ kernel: the rows' key ranges [rows]; Q, dO [rows, d], K, V
// [keys, d], dS [rows, keys] in bf16; the dQ accumulator [rows, d], the scores [rows, keys], lse
// and −D [rows] in f32.
constexpr std::int64_t wmma_dq_bytes(std::int64_t d) {
  return std::int64_t{sizeof(KeyRange)} * kWmmaRows +
         2 * (2 * kWmmaRows * d + 2 * kWmmaKeys * d + kWmmaRows * kWmmaKeys) +
         4 * (kWmmaRows * d + kWmmaRows * kWmmaKeys + 2 * kWmmaRows);
}
static_assert(wmma_dq_bytes(kWmmaMaxHeadDim) <= kMaxSharedBytes, "the WMMA dQ tiles outgrow the opt-in");

// Task t of q_tiles·batch·heads: query tile [i0, i0 + rows) of head (b, h), as the SIMT dQ
// kernel: its dQ rows summed over the key tiles of its window that some row sees, in order. Each
// warp owns its 16 rows of the dQ accumulator.
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_dq_wmma(AttentionShape s, std::int64_t tasks, const Bf16* q, const Bf16* k, const Bf16* v,
                               const float* lse, const Bf16* d_o, const float* minus_delta, float* dq,
                               bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const int d = static_cast<int>(s.head_dim);
  KeyRange* ranges = reinterpret_cast<KeyRange*>(smem_bytes);
  Bf16* qs = reinterpret_cast<Bf16*>(ranges + kWmmaRows);
  Bf16* dos = qs + kWmmaRows * d;
  Bf16* ks = dos + kWmmaRows * d;
  Bf16* vs = ks + kWmmaKeys * d;
  Bf16* dss = vs + kWmmaKeys * d;
  float* dqs = reinterpret_cast<float*>(dss + kWmmaRows * kWmmaKeys);
  float* sc = dqs + kWmmaRows * d;
  float* lse_s = sc + kWmmaRows * kWmmaKeys;
  float* md_s = lse_s + kWmmaRows;
  const int warp = threadIdx.x >> 5;
  const int row0 = 16 * warp;
  const std::int64_t q_stride = s.heads * d, kv_stride = s.kv_heads * d;

  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const auto [i0, rows, b, h, hk] = query_tile(s, kWmmaRows, task);
    __syncthreads();  // the previous task's output reads are done
    copy_rows_bf16(qs, q + q_at(s, b, i0, h), q_stride, kWmmaRows, rows, d);
    copy_rows_bf16(dos, d_o + q_at(s, b, i0, h), q_stride, kWmmaRows, rows, d);
    load_row_stats(s, b, h, i0, rows, kWmmaRows, lse, minus_delta, ranges, lse_s, md_s);
    for (int e = threadIdx.x; e < kWmmaRows * d; e += blockDim.x) dqs[e] = 0;
    __syncthreads();
    for_each_seen_key_tile(ranges, rows, kWmmaKeys, [&](std::int64_t k0, std::int64_t kn) {
      copy_rows_bf16(ks, k + kv_at(s, b, k0, hk), kv_stride, kWmmaKeys, kn, d);
      copy_rows_bf16(vs, v + kv_at(s, b, k0, hk), kv_stride, kWmmaKeys, kn, d);
      __syncthreads();
      warp_rows_times_keys(qs + row0 * d, ks, d, sc + row0 * kWmmaKeys);  // the warp's scores Q·Kᵀ
      __syncwarp();
      warp_probabilities_and_ds(s, row0, rows, k0, kn, ranges, lse_s, md_s, dos, vs, sc, nullptr, dss);
      __syncwarp();
      // The warp's dQ rows [16, d] += dS·K.
      for (int n0 = 0; n0 < d; n0 += 16)
        warp_accumulate<wmma::row_major>(dqs + row0 * d + n0, d, dss + row0 * kWmmaKeys, kWmmaKeys, ks + n0, d,
                                         kWmmaKeys);
    });
    __syncthreads();
    for (std::int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const std::int64_t r = e / d, c = e % d;
      const std::int64_t at = q_at(s, b, i0 + r, h) + c;
      dq[at] = accumulate ? dq[at] + dqs[e] : dqs[e];
    }
  }
}

// ---- launch -------------------------------------------------------------------------------------
// Elements of shared memory each kernel takes for a tile of `tile` rows, besides the rows' key
// ranges (shared_bytes adds them).
constexpr std::int64_t forward_elements(std::int64_t tile, std::int64_t d) {
  return 4 * tile * d + tile * tile + 3 * tile;
}
constexpr std::int64_t dkdv_elements(std::int64_t tile, std::int64_t d) {
  return 6 * tile * d + 2 * tile * tile + 2 * tile;
}
constexpr std::int64_t dq_elements(std::int64_t tile, std::int64_t d) { return 5 * tile * d + tile * tile + 2 * tile; }
using SharedElements = std::int64_t (*)(std::int64_t, std::int64_t);
// Bytes of shared memory a SIMT kernel takes for a tile of `tile` rows of Acc.
template <class Acc>
constexpr std::int64_t shared_bytes(SharedElements elements, std::int64_t tile, std::int64_t d) {
  return tile * std::int64_t{sizeof(KeyRange)} + elements(tile, d) * std::int64_t{sizeof(Acc)};
}
// The smallest tile holds the widest head in f64 (the largest of the three is dK/dV's, 97 KiB).
static_assert(shared_bytes<double>(dkdv_elements, 8, kMaxAttentionHeadDim) <= kMaxSharedBytes &&
                  shared_bytes<double>(forward_elements, 8, kMaxAttentionHeadDim) <= kMaxSharedBytes &&
                  shared_bytes<double>(dq_elements, 8, kMaxAttentionHeadDim) <= kMaxSharedBytes,
              "8-row f64 tiles at kMaxAttentionHeadDim outgrow the shared-memory opt-in");

// The largest tile (32, 16 or 8 rows) whose shared memory fits kMaxSharedBytes (head_dim <=
// kMaxAttentionHeadDim always fits 8 rows).
template <class Acc>
int choose_tile(SharedElements elements, std::int64_t d) {
  int tile = 32;
  while (tile > 8 && shared_bytes<Acc>(elements, tile, d) > kMaxSharedBytes) tile /= 2;
  return tile;
}

// Blocks for `tasks` block-sized tasks: the kernels loop over the rest.
int grid_for(std::int64_t tasks) {
  constexpr std::int64_t kMaxGrid = std::int64_t{1} << 30;
  return static_cast<int>(tasks < kMaxGrid ? tasks : kMaxGrid);
}

// Launches kernel over `tasks` blocks with `bytes` (<= kMaxSharedBytes) of dynamic shared memory.
// The opt-in above the default 48 KiB is the same limit on every call, so host threads launching
// one kernel with different sizes cannot lower it under each other's launch.
template <class Kernel, class... Args>
void launch_tiles(Kernel kernel, const char* name, cudaStream_t stream, std::int64_t tasks, std::size_t bytes,
                  Args... args) {
  if (tasks == 0) return;
  WF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kMaxSharedBytes)));
  kernel<<<grid_for(tasks), kBlockThreads, bytes, stream>>>(args...);
  WF_CUDA_CHECK_LAUNCH(name);
}

std::int64_t tiles_of(std::int64_t n, int tile) { return (n + tile - 1) / tile; }

// bf16 operands run on tensor cores when head_dim is whole fragments (and the tiles fit): else SIMT.
bool on_tensor_cores(const AttentionShape& s) { return s.head_dim % 16 == 0 && s.head_dim <= kWmmaMaxHeadDim; }

template <class In, class Acc>
void forward_simt(cudaStream_t stream, const AttentionShape& s, const In* q, const In* k, const In* v, Acc* o,
                  Acc* lse) {
  const int tile = choose_tile<Acc>(forward_elements, s.head_dim);
  const std::int64_t tasks = tiles_of(s.q_len, tile) * s.batch * s.heads;
  launch_tiles(attention_forward_simt<In, Acc>, "attention_forward_simt", stream, tasks,
               shared_bytes<Acc>(forward_elements, tile, s.head_dim), s, tile, tasks, q, k, v, o, lse);
}

template <class In, class Acc>
void backward_simt(cudaStream_t stream, const AttentionShape& s, const In* q, const In* k, const In* v, const Acc* o,
                   const Acc* lse, const In* d_o, Acc* dq, Acc* dk, Acc* dv, bool accumulate, const Acc* d_lse,
                   Acc* minus_delta) {
  launch_attention_minus_delta<In, Acc>(stream, s.batch, s.q_len, s.heads, s.head_dim, d_o, o, d_lse, minus_delta);
  const int kv_tile = choose_tile<Acc>(dkdv_elements, s.head_dim);
  const std::int64_t kv_tasks = tiles_of(s.kv_len, kv_tile) * s.batch * s.kv_heads;
  launch_tiles(attention_backward_dkdv_simt<In, Acc>, "attention_backward_dkdv_simt", stream, kv_tasks,
               shared_bytes<Acc>(dkdv_elements, kv_tile, s.head_dim), s, kv_tile, kv_tasks, q, k, v, lse, d_o,
               static_cast<const Acc*>(minus_delta), dk, dv, accumulate);
  const int q_tile = choose_tile<Acc>(dq_elements, s.head_dim);
  const std::int64_t q_tasks = tiles_of(s.q_len, q_tile) * s.batch * s.heads;
  launch_tiles(attention_backward_dq_simt<In, Acc>, "attention_backward_dq_simt", stream, q_tasks,
               shared_bytes<Acc>(dq_elements, q_tile, s.head_dim), s, q_tile, q_tasks, q, k, v, lse, d_o,
               static_cast<const Acc*>(minus_delta), dq, accumulate);
}

}  // namespace

void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const float* q, const float* k,
                              const float* v, float* o, float* lse) {
  forward_simt(stream, shape, q, k, v, o, lse);
}
void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const double* q, const double* k,
                              const double* v, double* o, double* lse) {
  forward_simt(stream, shape, q, k, v, o, lse);
}
void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, float* o, float* lse) {
  if (!on_tensor_cores(shape)) {
    forward_simt(stream, shape, q, k, v, o, lse);
    return;
  }
  const std::int64_t tasks = tiles_of(shape.q_len, kWmmaRows) * shape.batch * shape.heads;
  launch_tiles(attention_forward_wmma, "attention_forward_wmma", stream, tasks,
               static_cast<std::size_t>(wmma_forward_bytes(shape.head_dim)), shape, tasks, q, k, v, o, lse);
}

void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const float* q, const float* k,
                               const float* v, const float* o, const float* lse, const float* d_o, float* dq,
                               float* dk, float* dv, bool accumulate, const float* d_lse, float* minus_delta) {
  backward_simt(stream, shape, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, d_lse, minus_delta);
}
void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const double* q, const double* k,
                               const double* v, const double* o, const double* lse, const double* d_o, double* dq,
                               double* dk, double* dv, bool accumulate, const double* d_lse, double* minus_delta) {
  backward_simt(stream, shape, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, d_lse, minus_delta);
}
void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, const float* o, const float* lse,
                               const __nv_bfloat16* d_o, float* dq, float* dk, float* dv, bool accumulate,
                               const float* d_lse, float* minus_delta) {
  if (!on_tensor_cores(shape)) {
    backward_simt(stream, shape, q, k, v, o, lse, d_o, dq, dk, dv, accumulate, d_lse, minus_delta);
    return;
  }
  launch_attention_minus_delta<__nv_bfloat16, float>(stream, shape.batch, shape.q_len, shape.heads, shape.head_dim,
                                                     d_o, o, d_lse, minus_delta);
  const std::int64_t kv_tasks = tiles_of(shape.kv_len, kWmmaKeys) * shape.batch * shape.kv_heads;
  launch_tiles(attention_backward_dkdv_wmma, "attention_backward_dkdv_wmma", stream, kv_tasks,
               static_cast<std::size_t>(wmma_dkdv_bytes(shape.head_dim)), shape, kv_tasks, q, k, v, lse, d_o,
               static_cast<const float*>(minus_delta), dk, dv, accumulate);
  const std::int64_t q_tasks = tiles_of(shape.q_len, kWmmaRows) * shape.batch * shape.heads;
  launch_tiles(attention_backward_dq_wmma, "attention_backward_dq_wmma", stream, q_tasks,
               static_cast<std::size_t>(wmma_dq_bytes(shape.head_dim)), shape, q_tasks, q, k, v, lse, d_o,
               static_cast<const float*>(minus_delta), dq, accumulate);
}

}  // namespace wf::kernels::cuda
