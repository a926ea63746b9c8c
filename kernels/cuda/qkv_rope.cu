// The fused QKV split + RoPE kernels (kernels/cuda/qkv_rope.h): one thread per unit of a head,
// a rotated pair (i, i + d/2) when rotating, a single element for the plain split (head_dim may
// be odd there). Forward and backward share the unit's move; only the direction of the copy and
// the sign of the angle differ.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/qkv_rope.h"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// Where slot j of kv group `group` (= row·groups + g) lives among q, k and v (j < G: query head j,
// j = G: the key head, j = G + 1: the value head); null when that tensor is.
template <class P>
__device__ P split_head(const QkvDims& d, std::int64_t group, std::int64_t j, P q, P k, P v) {
  if (j < d.group_size) return q != nullptr ? q + (group * d.group_size + j) * d.head_dim : nullptr;
  P base = j == d.group_size ? k : v;
  return base != nullptr ? base + group * d.head_dim : nullptr;
}

// Unit u of head `head` (= (row·groups + g)·(G + 2) + j of projected) from `from` to `to`
// (null `from`: zeros). Rotating, unit u is the pair (u, u + half), turned for q and k (j <= G)
// by ±positions·inv_freq[u] and copied for v; otherwise it is element u.
template <class T>
__device__ void move_unit(const QkvDims& d, const double* inv_freq, const std::int64_t* positions, bool inverse,
                          std::int64_t head, std::int64_t u, const T* from, T* to) {
  const std::int64_t slots = d.group_size + 2, half = d.head_dim / 2;
  if (inv_freq == nullptr) {
    to[u] = from != nullptr ? from[u] : T(0);
    return;
  }
  if (from == nullptr) {
    to[u] = T(0);
    to[u + half] = T(0);
    return;
  }
  if (head % slots > d.group_size) {  // the value head: no rotation
    to[u] = from[u];
    to[u + half] = from[u + half];
    return;
  }
  const std::int64_t row = head / slots / d.groups;
  double s = 0.0, c = 0.0;
  sincos(static_cast<double>(positions[row % d.tokens]) * inv_freq[u], &s, &c);
  if (inverse) s = -s;  // the rotation by −a
  const double lo = static_cast<double>(from[u]), hi = static_cast<double>(from[u + half]);
  // Rounded products and sums (no fused multiply-add), as the CPU evaluates them.
  to[u] = static_cast<T>(__dsub_rn(__dmul_rn(lo, c), __dmul_rn(hi, s)));
  to[u + half] = static_cast<T>(__dadd_rn(__dmul_rn(lo, s), __dmul_rn(hi, c)));
}

// Units per head: pairs when rotating, elements otherwise.
__host__ __device__ std::int64_t units_per_head(const QkvDims& d, const double* inv_freq) {
  return inv_freq != nullptr ? d.head_dim / 2 : d.head_dim;
}

template <class T>
__global__ void qkv_rope_forward_kernel(QkvDims d, const double* inv_freq, const std::int64_t* positions,
                                        const T* projected, T* q, T* k, T* v) {
  const std::int64_t units = units_per_head(d, inv_freq), slots = d.group_size + 2;
  WF_GRID_STRIDE_LOOP(e, d.rows * d.groups * slots * units) {
    const std::int64_t head = e / units;
    T* to = split_head(d, head / slots, head % slots, q, k, v);
    move_unit(d, inv_freq, positions, /*inverse=*/false, head, e % units, projected + head * d.head_dim, to);
  }
}

template <class T>
__global__ void qkv_rope_backward_kernel(QkvDims d, const double* inv_freq, const std::int64_t* positions,
                                         const T* dq, const T* dk, const T* dv, T* d_projected) {
  const std::int64_t units = units_per_head(d, inv_freq), slots = d.group_size + 2;
  WF_GRID_STRIDE_LOOP(e, d.rows * d.groups * slots * units) {
    const std::int64_t head = e / units;
    const T* from = split_head(d, head / slots, head % slots, dq, dk, dv);
    move_unit(d, inv_freq, positions, /*inverse=*/true, head, e % units, from, d_projected + head * d.head_dim);
  }
}

}  // namespace

template <class T>
void launch_qkv_rope_forward(cudaStream_t stream, const QkvDims& dims, const double* inv_freq,
                             const std::int64_t* positions, const T* projected, T* q, T* k, T* v) {
  const std::int64_t n = dims.rows * dims.groups * (dims.group_size + 2) * units_per_head(dims, inv_freq);
  if (n == 0) return;
  qkv_rope_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dims, inv_freq, positions, projected, q, k, v);
  WF_CUDA_CHECK_LAUNCH("qkv_rope_forward_kernel");
}

template <class T>
void launch_qkv_rope_backward(cudaStream_t stream, const QkvDims& dims, const double* inv_freq,
                              const std::int64_t* positions, const T* dq, const T* dk, const T* dv, T* d_projected) {
  const std::int64_t n = dims.rows * dims.groups * (dims.group_size + 2) * units_per_head(dims, inv_freq);
  if (n == 0) return;
  qkv_rope_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dims, inv_freq, positions, dq, dk, dv,
                                                                      d_projected);
  WF_CUDA_CHECK_LAUNCH("qkv_rope_backward_kernel");
}

#define WF_INSTANTIATE_QKV_ROPE(T)                                                                               \
  template void launch_qkv_rope_forward<T>(cudaStream_t, const QkvDims&, const double*, const std::int64_t*,    \
                                           const T*, T*, T*, T*);                                               \
  template void launch_qkv_rope_backward<T>(cudaStream_t, const QkvDims&, const double*, const std::int64_t*,   \
                                            const T*, const T*, const T*, T*);
WF_INSTANTIATE_QKV_ROPE(float)
WF_INSTANTIATE_QKV_ROPE(double)
#undef WF_INSTANTIATE_QKV_ROPE

}  // namespace wf::kernels::cuda
