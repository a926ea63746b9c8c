// The AdamW kernels (kernels/cuda/optimizer.h): one thread per parameter, PyTorch's formula in
// kernels/cpu/optimizer.cpp's order of operations with every operation rounded as written, so the
// results are the CPU's to the last bit or so (the CPU compiler may fuse a multiply-add where its
// ISA has one; the bias correction of adamw_update takes the device's pow).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/optimizer.h"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// Rounded arithmetic in T: the compiler may not fuse these into multiply-adds.

// kernels/cpu/optimizer.cpp's AdamWScalars: formed in double, rounded to T once.
template <class T>
struct AdamWScalars {
  T decay, avg_weight, beta2, sq_weight, neg_step_size, bias_correction2_sqrt, eps;
};
// The step's two bias-correction coefficients (host or device: pow, a quotient, a square root).
template <class T>
__host__ __device__ void set_bias_correction(AdamWScalars<T>& s, const AdamWParams& p, double step) {
  s.neg_step_size = static_cast<T>(-(p.lr / (1.0 - pow(p.beta1, step))));
  s.bias_correction2_sqrt = static_cast<T>(sqrt(1.0 - pow(p.beta2, step)));
}
// On the host, with the host's libm, exactly as the CPU forms them.
template <class T>
AdamWScalars<T> adamw_scalars(const AdamWParams& p, std::int64_t step) {
  AdamWScalars<T> s{};
  s.decay = static_cast<T>(1.0 - p.lr * p.weight_decay);
  s.avg_weight = static_cast<T>(1.0 - p.beta1);
  s.beta2 = static_cast<T>(p.beta2);
  s.sq_weight = static_cast<T>(1.0 - p.beta2);
  s.eps = static_cast<T>(p.eps);
  set_bias_correction(s, p, static_cast<double>(step));
  return s;
}

// One element: exp_avg.lerp_(grad, w) by at::lerp's two-sided formula (the side fixed per call),
// then the second moment, the denominator and the decayed, stepped parameter.
template <class T>
__device__ __forceinline__ void adamw_element(std::int64_t i, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                              const AdamWScalars<T>& s, bool weight_below_half) {
  const T g = grad[i], a = exp_avg[i];
  const T m = weight_below_half ? add_rn(a, mul_rn(s.avg_weight, sub_rn(g, a)))
                                : sub_rn(g, mul_rn(sub_rn(g, a), sub_rn(T(1), s.avg_weight)));
  const T v = add_rn(mul_rn(exp_avg_sq[i], s.beta2), mul_rn(mul_rn(s.sq_weight, g), g));
  const T denom = add_rn(div_rn(sqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  param[i] = add_rn(mul_rn(param[i], s.decay), div_rn(mul_rn(s.neg_step_size, m), denom));
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
}

template <class T>
bool below_half(const AdamWScalars<T>& s) {
  return std::abs(s.avg_weight) < T(0.5);
}

template <class T>
__global__ void adamw_step_kernel(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                  AdamWScalars<T> s, bool weight_below_half) {
  WF_GRID_STRIDE_LOOP(i, n) { adamw_element(i, param, grad, exp_avg, exp_avg_sq, s, weight_below_half); }
}

// What each block of adamw_update's kernel decides before it touches an element.
template <class T>
struct UpdateState {
  AdamWScalars<T> s;
  T ema_decay, ema_weight;  // d and 1 − d, both in T as the CPU forms them
  int apply;
};

// kernel_args.h's ema_decay_at, on the device.
__device__ double ema_decay_at_device(double decay, std::int64_t earlier, bool warmup) {
  if (!warmup) return decay;
  const double n = static_cast<double>(earlier > 0 ? earlier : 0);
  const double ramp = (1.0 + n) / (10.0 + n);
  return ramp < decay ? ramp : decay;  // std::min(decay, ramp)
}

__device__ __forceinline__ bool update_applies(const double* grad_norm) {
  return grad_norm == nullptr || isfinite(*grad_norm);
}

// What a block's first thread forms for it from the tensor's count of earlier updates: whether the
// update applies, the bias correction of update earlier + 1 and the EMA decay of `earlier`.
template <class T>
__device__ UpdateState<T> update_state(const AdamWScalars<T>& base, const AdamWParams& p, const EmaParams& e,
                                       std::int64_t earlier, const double* grad_norm) {
  UpdateState<T> st{};
  st.s = base;
  st.apply = update_applies(grad_norm) ? 1 : 0;
  set_bias_correction(st.s, p, static_cast<double>(earlier + 1));
  st.ema_decay = static_cast<T>(ema_decay_at_device(e.decay, earlier, e.warmup));
  st.ema_weight = sub_rn(T(1), st.ema_decay);
  return st;
}

// One element's update, then its EMA: ema·d, then + (1 − d)·param (scale_inplace and add_scaled,
// as the CPU runs them).
template <class T>
__device__ __forceinline__ void update_element(std::int64_t i, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                               T* ema, const UpdateState<T>& st, bool weight_below_half) {
  adamw_element(i, param, grad, exp_avg, exp_avg_sq, st.s, weight_below_half);
  if (ema != nullptr) ema[i] = add_rn(mul_rn(st.ema_decay, ema[i]), mul_rn(st.ema_weight, param[i]));
}

// The decision (is *grad_norm finite, or null), the bias correction of update *applied + 1 and the
// EMA decay of *applied, formed by each block's first thread (the same values in every block:
// *applied changes only in the next kernel); then the update of the block's elements, or nothing.
template <class T>
__global__ void adamw_update_kernel(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* ema,
                                    AdamWScalars<T> base, AdamWParams p, EmaParams e, const std::int64_t* applied,
                                    const double* grad_norm, bool weight_below_half) {
  __shared__ UpdateState<T> shared;
  if (threadIdx.x == 0) shared = update_state(base, p, e, *applied, grad_norm);
  __syncthreads();
  const UpdateState<T> st = shared;
  if (!st.apply) return;  // a diverged step: every array stays as it was
  WF_GRID_STRIDE_LOOP(i, n) update_element(i, param, grad, exp_avg, exp_avg_sq, ema, st, weight_below_half);
}

// After the update, in stream order: the one increment of *applied when the update applied.
__global__ void adamw_count_kernel(std::int64_t* applied, const double* grad_norm) {
  if (update_applies(grad_norm)) *applied += 1;
}

}  // namespace

template <class T>
void launch_adamw_step(cudaStream_t stream, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                       const AdamWParams& p) {
  if (n == 0) return;
  const AdamWScalars<T> s = adamw_scalars<T>(p, p.step);
  adamw_step_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, param, grad, exp_avg, exp_avg_sq, s,
                                                               below_half(s));
  WF_CUDA_CHECK_LAUNCH("adamw_step_kernel");
}

template <class T>
void launch_adamw_update(cudaStream_t stream, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                         T* ema, const AdamWParams& p, const EmaParams& e, std::int64_t* applied,
                         const double* grad_norm) {
  // The step-independent coefficients from the host (step 1's correction is replaced on the device).
  const AdamWScalars<T> base = adamw_scalars<T>(p, 1);
  if (n > 0) {
    adamw_update_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, param, grad, exp_avg, exp_avg_sq, ema, base, p,
                                                                   e, applied, grad_norm, below_half(base));
    WF_CUDA_CHECK_LAUNCH("adamw_update_kernel");
  }
  adamw_count_kernel<<<1, 1, 0, stream>>>(applied, grad_norm);  // n = 0 still counts, as on the CPU
  WF_CUDA_CHECK_LAUNCH("adamw_count_kernel");
}

#define WF_INSTANTIATE_OPTIMIZER(T)                                                                                \
  template void launch_adamw_step<T>(cudaStream_t, std::int64_t, T*, const T*, T*, T*, const AdamWParams&);       \
  template void launch_adamw_update<T>(cudaStream_t, std::int64_t, T*, const T*, T*, T*, T*, const AdamWParams&, \
                                       const EmaParams&, std::int64_t*, const double*);
WF_INSTANTIATE_OPTIMIZER(float)
WF_INSTANTIATE_OPTIMIZER(double)
#undef WF_INSTANTIATE_OPTIMIZER

// ---- multi-tensor AdamW -------------------------------------------------------------------------
namespace {

// Elements per block of the multi-tensor kernel: 16 per thread, so that a block's decision (one
// thread's pows) is a small part of its work.
constexpr std::int64_t kMultiChunk = std::int64_t{kThreads} * 16;

// Block b of tensor t updates its chunk [b·kMultiChunk, (b + 1)·kMultiChunk) ∩ [0, n) exactly as
// adamw_update_kernel updates those elements: same state from *applied, same element arithmetic.
template <class T>
__global__ void adamw_update_multi_kernel(std::int64_t tensors, const AdamWMultiEntry* table, AdamWScalars<T> base,
                                          AdamWParams p, EmaParams e, const double* grad_norm,
                                          bool weight_below_half) {
  __shared__ UpdateState<T> shared;
  __shared__ std::int64_t tensor;
  if (threadIdx.x == 0) {
    tensor = tensor_of_block(table, tensors, blockIdx.x);
    shared = update_state(base, p, e, *table[tensor].applied, grad_norm);
  }
  __syncthreads();
  const UpdateState<T> st = shared;
  if (!st.apply) return;  // a diverged step: every array stays as it was
  const AdamWMultiEntry m = table[tensor];
  T* param = static_cast<T*>(m.param);
  const T* grad = static_cast<const T*>(m.grad);
  T* exp_avg = static_cast<T*>(m.exp_avg);
  T* exp_avg_sq = static_cast<T*>(m.exp_avg_sq);
  T* ema = static_cast<T*>(m.ema);
  const std::int64_t begin = (static_cast<std::int64_t>(blockIdx.x) - m.blocks.first) * kMultiChunk;
  const std::int64_t end = begin + kMultiChunk < m.n ? begin + kMultiChunk : m.n;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    update_element(i, param, grad, exp_avg, exp_avg_sq, ema, st, weight_below_half);
  }
}

// After the update, in stream order: each tensor's one increment when the update applied.
__global__ void adamw_count_multi_kernel(std::int64_t tensors, const AdamWMultiEntry* table,
                                         const double* grad_norm) {
  if (!update_applies(grad_norm)) return;
  WF_GRID_STRIDE_LOOP(t, tensors) *table[t].applied += 1;
}

}  // namespace

std::int64_t adamw_update_multi_blocks(std::int64_t n) { return (n + kMultiChunk - 1) / kMultiChunk; }

template <class T>
void launch_adamw_update_multi(cudaStream_t stream, std::int64_t tensors, const AdamWMultiEntry* table,
                               std::int64_t blocks, const AdamWParams& p, const EmaParams& e,
                               const double* grad_norm) {
  if (tensors == 0) return;
  const AdamWScalars<T> base = adamw_scalars<T>(p, 1);  // as launch_adamw_update forms it
  if (blocks > 0) {
    adamw_update_multi_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        tensors, table, base, p, e, grad_norm, below_half(base));
    WF_CUDA_CHECK_LAUNCH("adamw_update_multi_kernel");
  }
  adamw_count_multi_kernel<<<blocks_for(tensors), kThreads, 0, stream>>>(tensors, table, grad_norm);
  WF_CUDA_CHECK_LAUNCH("adamw_count_multi_kernel");
}

template void launch_adamw_update_multi<float>(cudaStream_t, std::int64_t, const AdamWMultiEntry*, std::int64_t,
                                               const AdamWParams&, const EmaParams&, const double*);
template void launch_adamw_update_multi<double>(cudaStream_t, std::int64_t, const AdamWMultiEntry*, std::int64_t,
                                                const AdamWParams&, const EmaParams&, const double*);

}  // namespace wf::kernels::cuda
