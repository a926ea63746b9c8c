#pragma once
// The geometry of the CUDA attention kernels' tiles (attention.cu, sm90/attention_forward.cu):
// which keys a query row sees, which key tiles a query tile visits, which rows see a key tile,
// the layouts' offsets and the order of the tasks. Device code only; include from .cu files.
#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cuda::attention_tiles {

// ---- geometry -----------------------------------------------------------------------------------
// Query row i of batch row b sees the keys [begin, end) of attention_key_range (kernels/kernel_args.h):
// the call's key window for the row (packed documents), else the causal or full prefix. Both
// ends are non-decreasing in i, so a query tile sees one window [begin of its first row, end of
// its last) and a key tile is seen by one contiguous run of query rows (kernels/cpu/attention.cpp).
// Without windows every window begins at key 0: the tiles are those of the plain prefix.
__device__ __forceinline__ std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ bool sees(const KeyRange& range, std::int64_t j) {
  return j >= range.begin && j < range.end;
}

// The key ranges of a tile's rows [i0, i0 + rows) into shared memory; padding rows see nothing.
inline __device__ void load_key_ranges(const AttentionShape& s, std::int64_t b, std::int64_t i0, std::int64_t rows,
                                       int tile, KeyRange* ranges) {
  for (int r = threadIdx.x; r < tile; r += blockDim.x)
    ranges[r] = r < rows ? attention_key_range(s, b, i0 + r) : KeyRange{};
}

// Whether some row of a tile (ranges of rows [0, rows) in shared memory) sees a key of [k0, k1).
// A block barrier (__syncthreads_or): every thread calls it with the same arguments, and the
// block's shared-memory accesses before it are ordered before those after it.
inline __device__ bool tile_sees_keys(const KeyRange* ranges, std::int64_t rows, std::int64_t k0, std::int64_t k1) {
  int seen = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) seen |= ranges[r].end > k0 && ranges[r].begin < k1;
  return __syncthreads_or(seen) != 0;
}

// The first key tile [k0', k0' + tile) with k0' = k0 + n·tile (n >= 0) that some row sees, as
// for_each_seen_key_tile walks them; the rows' window end (ranges[rows − 1].end) when none is left.
// Every thread calls it alike (tile_sees_keys is a barrier; none is made when no tile is left).
// For kernels that start the next tile's copies before this tile's products.
inline __device__ std::int64_t next_seen_key_tile(const KeyRange* ranges, std::int64_t rows, int tile,
                                                  std::int64_t k0) {
  const std::int64_t key_end = ranges[rows - 1].end;
  for (; k0 < key_end; k0 += tile) {
    if (tile_sees_keys(ranges, rows, k0, k0 + min64(tile, key_end - k0))) return k0;
  }
  return key_end;
}

// Calls body(k0, kn) for each key tile [k0, k0 + kn) of `tile` keys, in order, that some row of a
// query tile sees (ranges as for tile_sees_keys, visible to every thread): the tiles of the rows'
// window [begin of the first, end of the last) but those no row sees (between the documents of a
// ring block). Keys outside the window are masked for every row: never loaded. Every thread calls
// it alike; a barrier precedes each body, so a body may overwrite what the previous one read.
template <class Body>
__device__ void for_each_seen_key_tile(const KeyRange* ranges, std::int64_t rows, int tile, Body body) {
  const std::int64_t key_begin = ranges[0].begin, key_end = ranges[rows - 1].end;
  for (std::int64_t k0 = key_begin; k0 < key_end; k0 += tile) {
    const std::int64_t kn = min64(tile, key_end - k0);
    if (tile_sees_keys(ranges, rows, k0, k0 + kn)) body(k0, kn);
  }
}

// The query rows [first, last) of batch row b that see some key of [k0, k1): those with end > k0
// and begin < k1, contiguous since both ends are monotone. Every thread computes the same run.
struct RowRun {
  std::int64_t first, last;
};
inline __device__ RowRun rows_seeing(const AttentionShape& s, std::int64_t b, std::int64_t k0, std::int64_t k1) {
  std::int64_t lo = 0, hi = s.q_len;  // the first row whose end > k0
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (attention_key_range(s, b, mid).end <= k0) lo = mid + 1; else hi = mid;
  }
  const std::int64_t first = lo;
  hi = s.q_len;  // from there, the first row whose begin >= k1
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (attention_key_range(s, b, mid).begin < k1) lo = mid + 1; else hi = mid;
  }
  return {first, lo};
}
__device__ __forceinline__ std::int64_t q_at(const AttentionShape& s, std::int64_t b, std::int64_t i,
                                             std::int64_t h) {
  return ((b * s.q_len + i) * s.heads + h) * s.head_dim;
}
__device__ __forceinline__ std::int64_t kv_at(const AttentionShape& s, std::int64_t b, std::int64_t j,
                                              std::int64_t hk) {
  return ((b * s.kv_len + j) * s.kv_heads + hk) * s.head_dim;
}
__device__ __forceinline__ std::int64_t lse_at(const AttentionShape& s, std::int64_t b, std::int64_t h,
                                               std::int64_t i) {
  return (b * s.heads + h) * s.q_len + i;
}

// Query-tile task t of q_tiles·batch·heads (the forward and dQ kernels): rows [i0, i0 + rows) of
// query head h of batch row b, which reads kv head hk. The last tiles go first: under a causal
// mask they see the most keys.
struct QueryTile {
  std::int64_t i0, rows, b, h, hk;
};
__device__ __forceinline__ QueryTile query_tile(const AttentionShape& s, int tile, std::int64_t task) {
  const std::int64_t bh_count = s.batch * s.heads, q_tiles = (s.q_len + tile - 1) / tile;
  const std::int64_t i0 = (q_tiles - 1 - task / bh_count) * tile, h = task % s.heads;
  return {i0, min64(tile, s.q_len - i0), (task % bh_count) / s.heads, h, h / (s.heads / s.kv_heads)};
}
// Key-tile task t of kv_tiles·batch·kv_heads (the dK/dV kernels): keys [j0, j0 + kn) of kv head
// hk of batch row b.
struct KeyTile {
  std::int64_t j0, kn, b, hk;
};
__device__ __forceinline__ KeyTile key_tile(const AttentionShape& s, int tile, std::int64_t task) {
  const std::int64_t groups = s.batch * s.kv_heads, j0 = (task / groups) * tile;
  return {j0, min64(tile, s.kv_len - j0), (task % groups) / s.kv_heads, task % s.kv_heads};
}

}  // namespace wf::kernels::cuda::attention_tiles
