// The lse merge of partial attention outputs and sequence-parallel attention's row pieces on
// CUDA: the CPU kernels of kernels/cpu/attention.cpp (attention_merge) and kernels/cpu/
// sp_attention.cpp, one thread or one warp per row, summing in the CPU's order where a row's
// result must be alike on every member (team_lse_combine).
#include <math.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;


// Rows handled one per warp: the warp's first row and the stride between its rows.
__device__ __forceinline__ std::int64_t first_warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
}
__device__ __forceinline__ std::int64_t warp_row_stride() {
  return static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
}

// One warp per row r of [batch, q_len, heads] (lse index (b·heads + h)·q_len + i), as the CPU:
// a −inf partial leaves the row, a −inf running row takes the partial, else the overflow-safe
// weighted mean with lse = hi + log1p(ratio).
template <class T>
__global__ void attention_merge_kernel(std::int64_t rows, std::int64_t q_len, std::int64_t heads,
                                       std::int64_t head_dim, T* o, T* lse, const T* o_i, const T* lse_i) {
  const int lane = threadIdx.x & 31;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const std::int64_t h = r % heads, i = (r / heads) % q_len, b = r / (heads * q_len);
    const std::int64_t at = (b * heads + h) * q_len + i;
    const T mine = lse[at], theirs = lse_i[at];
    __syncwarp();  // every lane has read lse[at] before lane 0 may overwrite it below
    if (theirs == neg_inf<T>()) continue;  // the partial saw no key (warp-uniform)
    T* out = o + r * head_dim;
    const T* in = o_i + r * head_dim;
    if (mine == neg_inf<T>()) {
      for (std::int64_t c = lane; c < head_dim; c += 32) out[c] = in[c];
      if (lane == 0) lse[at] = theirs;
      continue;
    }
    const T hi = mine > theirs ? mine : theirs;
    const T ratio = dev_exp((mine < theirs ? mine : theirs) - hi);
    const T w_small = ratio / (T(1) + ratio), w_big = T(1) / (T(1) + ratio);
    const T w_mine = mine >= theirs ? w_big : w_small;
    const T w_theirs = mine >= theirs ? w_small : w_big;
    for (std::int64_t c = lane; c < head_dim; c += 32) out[c] = w_mine * out[c] + w_theirs * in[c];
    if (lane == 0) lse[at] = hi + dev_log1p(ratio);
  }
}

// One thread per row; the members in order, as the CPU (every member gets the same bits).
template <class T>
__global__ void team_lse_combine_kernel(int members, std::int64_t rows, int member, const T* all, T* lse_star,
                                        T* weight) {
  WF_GRID_STRIDE_LOOP(r, rows) {
    T hi = neg_inf<T>();
    for (int c = 0; c < members; ++c) {
      const T x = all[c * rows + r];
      hi = x > hi ? x : hi;
    }
    if (hi == neg_inf<T>()) {
      lse_star[r] = hi;
      weight[r] = T(0);
      continue;
    }
    T sum = 0;
    for (int c = 0; c < members; ++c) sum += dev_exp(all[c * rows + r] - hi);
    const T star = hi + dev_log(sum);
    lse_star[r] = star;
    weight[r] = dev_exp(all[member * rows + r] - star);
  }
}

// o [B, n, h, d] *= weight [B, h, n], one thread per element.
template <class T>
__global__ void scale_attention_rows_kernel(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d, T* o,
                                            const T* weight) {
  WF_GRID_STRIDE_LOOP(e, B * n * h * d) {
    const std::int64_t row = e / d;  // (b·n + i)·h + head
    const std::int64_t head = row % h, i = (row / h) % n, b = row / (h * n);
    o[e] *= weight[(b * h + head) * n + i];
  }
}

// One warp per row (b, i, head): out[(b·h + head)·n + i] = d_lse − Σ_e d_o·o.
template <class In, class T>
__global__ void attention_minus_delta_kernel(std::int64_t B, std::int64_t n, std::int64_t h, std::int64_t d,
                                             const In* d_o, const T* o, const T* d_lse, T* out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t rows = B * n * h;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const std::int64_t head = r % h, i = (r / h) % n, b = r / (h * n);
    T dot = 0;
    for (std::int64_t e = lane; e < d; e += 32) dot += T(to_float(d_o[r * d + e])) * o[r * d + e];
    dot = warp_sum(dot);
    if (lane == 0) {
      const std::int64_t at = (b * h + head) * n + i;
      out[at] = (d_lse != nullptr ? d_lse[at] : T(0)) - dot;
    }
  }
}

int blocks_for_rows(std::int64_t rows) { return blocks_for(rows, kWarpsPerBlock); }

}  // namespace

template <class T>
void launch_attention_merge(cudaStream_t stream, std::int64_t batch, std::int64_t q_len, std::int64_t heads,
                            std::int64_t head_dim, T* o, T* lse, const T* o_i, const T* lse_i) {
  const std::int64_t rows = batch * q_len * heads;
  if (rows == 0) return;
  attention_merge_kernel<T><<<blocks_for_rows(rows), kThreads, 0, stream>>>(rows, q_len, heads, head_dim, o, lse,
                                                                            o_i, lse_i);
  WF_CUDA_CHECK_LAUNCH("attention_merge_kernel");
}

template <class T>
void launch_team_lse_combine(cudaStream_t stream, int members, std::int64_t rows, int member, const T* all,
                             T* lse_star, T* weight) {
  if (rows == 0) return;
  team_lse_combine_kernel<T><<<blocks_for(rows), kThreads, 0, stream>>>(members, rows, member, all, lse_star,
                                                                        weight);
  WF_CUDA_CHECK_LAUNCH("team_lse_combine_kernel");
}

template <class T>
void launch_scale_attention_rows(cudaStream_t stream, std::int64_t B, std::int64_t n, std::int64_t h,
                                 std::int64_t d, T* o, const T* weight) {
  const std::int64_t count = B * n * h * d;
  if (count == 0) return;
  scale_attention_rows_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(B, n, h, d, o, weight);
  WF_CUDA_CHECK_LAUNCH("scale_attention_rows_kernel");
}

template <class In, class T>
void launch_attention_minus_delta(cudaStream_t stream, std::int64_t B, std::int64_t n, std::int64_t h,
                                  std::int64_t d, const In* d_o, const T* o, const T* d_lse, T* out) {
  const std::int64_t rows = B * n * h;
  if (rows == 0) return;
  attention_minus_delta_kernel<In, T><<<blocks_for_rows(rows), kThreads, 0, stream>>>(B, n, h, d, d_o, o, d_lse,
                                                                                      out);
  WF_CUDA_CHECK_LAUNCH("attention_minus_delta_kernel");
}

#define WF_INSTANTIATE_SP_ATTENTION(T)                                                                            \
  template void launch_attention_merge<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                                          T*, T*, const T*, const T*);                                          \
  template void launch_team_lse_combine<T>(cudaStream_t, int, std::int64_t, int, const T*, T*, T*);              \
  template void launch_scale_attention_rows<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t,          \
                                               std::int64_t, T*, const T*);                                      \
  template void launch_attention_minus_delta<T, T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t,       \
                                                   std::int64_t, const T*, const T*, const T*, T*);
WF_INSTANTIATE_SP_ATTENTION(float)
WF_INSTANTIATE_SP_ATTENTION(double)
#undef WF_INSTANTIATE_SP_ATTENTION
template void launch_attention_minus_delta<__nv_bfloat16, float>(cudaStream_t, std::int64_t, std::int64_t,
                                                                 std::int64_t, std::int64_t, const __nv_bfloat16*,
                                                                 const float*, const float*, float*);

}  // namespace wf::kernels::cuda
