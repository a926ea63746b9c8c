// The elementwise CUDA kernels (kernels/cuda/elementwise.h): one thread per element in a grid-
// stride loop. Arithmetic goes through the *_rn intrinsics below wherever nvcc would otherwise
// fuse a product and a sum into an FMA, so the results round as the CPU's unfused loops do.
#include "kernels/cuda/elementwise.h"

#include <cuda_runtime.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "src/core/philox.h"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// One IEEE operation each, rounded to nearest, never contracted.


// ---- binary ops with broadcasting --------------------------------------------------------------

template <class T>
struct Add {
  __device__ T operator()(T a, T b) const { return add_rn(a, b); }
};
template <class T>
struct Sub {
  __device__ T operator()(T a, T b) const { return sub_rn(a, b); }
};
template <class T>
struct Mul {
  __device__ T operator()(T a, T b) const { return mul_rn(a, b); }
};
template <class T>
struct Div {
  __device__ T operator()(T a, T b) const { return div_rn(a, b); }
};

template <class T, class Op>
__global__ void binary_broadcast_kernel(Op op, std::int64_t n, StridedLayout<2> layout, const T* a, const T* b,
                                        T* out) {
  WF_GRID_STRIDE_LOOP(i, n) {
    std::int64_t offset[2];
    strided_offsets(layout, i, offset);
    out[i] = op(a[offset[0]], b[offset[1]]);
  }
}

template <class T, class Op>
void run_binary(cudaStream_t stream, Op op, std::int64_t n, const StridedLayout<2>& layout, const T* a, const T* b,
                T* out) {
  binary_broadcast_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(op, n, layout, a, b, out);
  WF_CUDA_CHECK_LAUNCH("binary_broadcast_kernel");
}

// ---- linear ------------------------------------------------------------------------------------

template <class T>
__global__ void affine_kernel(std::int64_t n, T alpha, T shift, const T* x, T* out) {
  WF_GRID_STRIDE_LOOP(i, n) out[i] = add_rn(mul_rn(alpha, x[i]), shift);
}
template <class T>
__global__ void scale_kernel(std::int64_t n, T alpha, const T* x, T* out) {
  WF_GRID_STRIDE_LOOP(i, n) out[i] = mul_rn(alpha, x[i]);
}
template <class T>
__global__ void add_scaled_kernel(std::int64_t n, T alpha, const T* x, T* y) {
  WF_GRID_STRIDE_LOOP(i, n) y[i] = add_rn(y[i], mul_rn(alpha, x[i]));
}
template <class T>
__global__ void bias_residual_add_kernel(std::int64_t n, std::int64_t cols, const T* x, const T* bias,
                                         const T* residual, T* out) {
  WF_GRID_STRIDE_LOOP(i, n) {
    T v = x[i];
    if (bias != nullptr) v = add_rn(v, bias[i % cols]);
    if (residual != nullptr) v = add_rn(v, residual[i]);
    out[i] = v;
  }
}

// ---- activations: the formulas of kernels/cpu/elementwise.cpp, operation for operation ---------

template <class T>
struct Gelu {
  static constexpr T kSqrt2OverPi = T(0.7978845608028654);  // √(2/π)
  static constexpr T kCubic = T(0.044715);
  static constexpr T kCubic3 = T(3) * kCubic;  // the CPU's T(3) * kCubic, rounded in T alike
  __device__ static T tanh_part(T x) {
    const T cube = mul_rn(mul_rn(mul_rn(kCubic, x), x), x);
    return dev_tanh(mul_rn(kSqrt2OverPi, add_rn(x, cube)));
  }
  __device__ static T forward(T x) { return mul_rn(mul_rn(T(0.5), x), add_rn(T(1), tanh_part(x))); }
  __device__ static T derivative(T x) {
    const T t = tanh_part(x);
    const T poly = add_rn(T(1), mul_rn(mul_rn(kCubic3, x), x));
    const T dt_dx = mul_rn(mul_rn(kSqrt2OverPi, poly), sub_rn(T(1), mul_rn(t, t)));
    return add_rn(mul_rn(T(0.5), add_rn(T(1), t)), mul_rn(mul_rn(T(0.5), x), dt_dx));
  }
};

template <class T>
struct Silu {
  __device__ static T sigmoid(T x) { return div_rn(T(1), add_rn(T(1), dev_exp(-x))); }  // exp overflow: 0
  __device__ static T forward(T x) { return mul_rn(x, sigmoid(x)); }
  __device__ static T derivative(T x) {
    const T s = sigmoid(x);
    return mul_rn(s, add_rn(T(1), mul_rn(x, sub_rn(T(1), s))));
  }
};

template <class T>
struct GeluForward {
  __device__ T operator()(T x) const { return Gelu<T>::forward(x); }
};
template <class T>
struct SiluForward {
  __device__ T operator()(T x) const { return Silu<T>::forward(x); }
};
template <class T>
struct ExpForward {
  __device__ T operator()(T x) const { return dev_exp(x); }
};
template <class T>
struct LnForward {
  __device__ T operator()(T x) const { return dev_log(x); }
};
template <class T>
struct TanhForward {
  __device__ T operator()(T x) const { return dev_tanh(x); }
};

// dx = dy·f'(saved): f' from x for gelu and silu, from y for tanh (1 − y²).
template <class T>
struct GeluBackward {
  __device__ T operator()(T x, T dy) const { return mul_rn(dy, Gelu<T>::derivative(x)); }
};
template <class T>
struct SiluBackward {
  __device__ T operator()(T x, T dy) const { return mul_rn(dy, Silu<T>::derivative(x)); }
};
template <class T>
struct TanhBackward {
  __device__ T operator()(T y, T dy) const { return mul_rn(dy, sub_rn(T(1), mul_rn(y, y))); }
};

template <class T, class F>
__global__ void unary_kernel(F f, std::int64_t n, const T* x, T* y) {
  WF_GRID_STRIDE_LOOP(i, n) y[i] = f(x[i]);
}
template <class T, class F>
__global__ void unary_backward_kernel(F f, std::int64_t n, const T* saved, const T* dy, T* dx) {
  WF_GRID_STRIDE_LOOP(i, n) dx[i] = f(saved[i], dy[i]);
}

template <class T, class F>
void run_unary(cudaStream_t stream, F f, std::int64_t n, const T* x, T* y) {
  unary_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(f, n, x, y);
  WF_CUDA_CHECK_LAUNCH("unary_kernel");
}
template <class T, class F>
void run_unary_backward(cudaStream_t stream, F f, std::int64_t n, const T* saved, const T* dy, T* dx) {
  unary_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(f, n, saved, dy, dx);
  WF_CUDA_CHECK_LAUNCH("unary_backward_kernel");
}

// ---- dropout, clamp, scalings ------------------------------------------------------------------

// Element k of the slice is element (k / block)·stride + start + k % block of the whole tensor
// (DropoutLayout::whole_index), drawn at first + that index of stream `seed`, as the CPU draws it.
template <class T>
__global__ void dropout_mask_kernel(std::int64_t n, double p, T keep_scale, std::uint64_t seed, std::uint64_t first,
                                    std::uint64_t block, std::uint64_t stride, std::uint64_t start, const T* x,
                                    T* out) {
  WF_GRID_STRIDE_LOOP(i, n) {
    const auto k = static_cast<std::uint64_t>(i);
    const std::uint64_t whole = (k / block) * stride + start + k % block;
    const bool keep = ::wf::detail::philox_uniform(seed, first + whole) >= p;
    out[i] = keep ? mul_rn(x[i], keep_scale) : T(0);
  }
}

template <class T>
__global__ void clamp_kernel(std::int64_t n, T lo, T hi, const T* x, T* y) {
  WF_GRID_STRIDE_LOOP(i, n) {
    const T v = x[i];
    y[i] = v < lo ? lo : (hi < v ? hi : v);
  }
}

template <class T>
__global__ void scale_by_device_factor_kernel(std::int64_t n, T* x, const double* factor, bool only_below_one) {
  const double f = *factor;
  if (only_below_one && f >= 1.0) return;  // NaN scales (!(NaN >= 1)), as the CPU's
  const T alpha = static_cast<T>(f);
  WF_GRID_STRIDE_LOOP(i, n) x[i] = mul_rn(alpha, x[i]);
}

}  // namespace

template <class T>
void launch_binary_broadcast(cudaStream_t stream, BinaryOp op, std::int64_t n, const StridedLayout<2>& layout,
                             const T* a, const T* b, T* out) {
  switch (op) {
    case BinaryOp::add: return run_binary(stream, Add<T>{}, n, layout, a, b, out);
    case BinaryOp::sub: return run_binary(stream, Sub<T>{}, n, layout, a, b, out);
    case BinaryOp::mul: return run_binary(stream, Mul<T>{}, n, layout, a, b, out);
    case BinaryOp::div: return run_binary(stream, Div<T>{}, n, layout, a, b, out);
  }
}

template <class T>
void launch_affine(cudaStream_t stream, std::int64_t n, T alpha, T shift, const T* x, T* out) {
  if (shift == T(0)) {
    scale_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, alpha, x, out);
    WF_CUDA_CHECK_LAUNCH("scale_kernel");
    return;
  }
  affine_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, alpha, shift, x, out);
  WF_CUDA_CHECK_LAUNCH("affine_kernel");
}

template <class T>
void launch_add_scaled(cudaStream_t stream, std::int64_t n, T alpha, const T* x, T* y) {
  add_scaled_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, alpha, x, y);
  WF_CUDA_CHECK_LAUNCH("add_scaled_kernel");
}

template <class T>
void launch_bias_residual_add(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, const T* bias,
                              const T* residual, T* out) {
  const std::int64_t n = rows * cols;
  bias_residual_add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, cols, x, bias, residual, out);
  WF_CUDA_CHECK_LAUNCH("bias_residual_add_kernel");
}

template <class T>
void launch_unary_forward(cudaStream_t stream, UnaryOp op, std::int64_t n, const T* x, T* y) {
  switch (op) {
    case UnaryOp::gelu: return run_unary(stream, GeluForward<T>{}, n, x, y);
    case UnaryOp::silu: return run_unary(stream, SiluForward<T>{}, n, x, y);
    case UnaryOp::exp: return run_unary(stream, ExpForward<T>{}, n, x, y);
    case UnaryOp::ln: return run_unary(stream, LnForward<T>{}, n, x, y);
    case UnaryOp::tanh: return run_unary(stream, TanhForward<T>{}, n, x, y);
  }
}

template <class T>
void launch_unary_backward(cudaStream_t stream, UnaryOp op, std::int64_t n, const T* saved, const T* dy, T* dx) {
  switch (op) {
    case UnaryOp::gelu: return run_unary_backward(stream, GeluBackward<T>{}, n, saved, dy, dx);
    case UnaryOp::silu: return run_unary_backward(stream, SiluBackward<T>{}, n, saved, dy, dx);
    case UnaryOp::tanh: return run_unary_backward(stream, TanhBackward<T>{}, n, saved, dy, dx);
    default: return;  // the entry refuses exp and ln (their backwards are ordinary ops)
  }
}

template <class T>
void launch_dropout_mask(cudaStream_t stream, std::int64_t n, double p, T keep_scale, std::uint64_t seed,
                         std::uint64_t first, std::uint64_t block, std::uint64_t stride, std::uint64_t start,
                         const T* x, T* out) {
  dropout_mask_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, p, keep_scale, seed, first, block, stride, start,
                                                                  x, out);
  WF_CUDA_CHECK_LAUNCH("dropout_mask_kernel");
}

template <class T>
void launch_clamp(cudaStream_t stream, std::int64_t n, T lo, T hi, const T* x, T* y) {
  clamp_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, lo, hi, x, y);
  WF_CUDA_CHECK_LAUNCH("clamp_kernel");
}

template <class T>
void launch_scale(cudaStream_t stream, std::int64_t n, T* x, T alpha) {
  scale_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, alpha, x, x);
  WF_CUDA_CHECK_LAUNCH("scale_kernel");
}

template <class T>
void launch_scale_by_device_factor(cudaStream_t stream, std::int64_t n, T* x, const double* factor,
                                   bool only_below_one) {
  scale_by_device_factor_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(n, x, factor, only_below_one);
  WF_CUDA_CHECK_LAUNCH("scale_by_device_factor_kernel");
}

#define WF_INSTANTIATE_ELEMENTWISE_LAUNCHERS(T)                                                                   \
  template void launch_binary_broadcast<T>(cudaStream_t, BinaryOp, std::int64_t, const StridedLayout<2>&,         \
                                           const T*, const T*, T*);                                              \
  template void launch_affine<T>(cudaStream_t, std::int64_t, T, T, const T*, T*);                                \
  template void launch_add_scaled<T>(cudaStream_t, std::int64_t, T, const T*, T*);                               \
  template void launch_bias_residual_add<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const T*,        \
                                            const T*, T*);                                                       \
  template void launch_unary_forward<T>(cudaStream_t, UnaryOp, std::int64_t, const T*, T*);                      \
  template void launch_unary_backward<T>(cudaStream_t, UnaryOp, std::int64_t, const T*, const T*, T*);           \
  template void launch_dropout_mask<T>(cudaStream_t, std::int64_t, double, T, std::uint64_t, std::uint64_t,      \
                                       std::uint64_t, std::uint64_t, std::uint64_t, const T*, T*);               \
  template void launch_clamp<T>(cudaStream_t, std::int64_t, T, T, const T*, T*);                                 \
  template void launch_scale<T>(cudaStream_t, std::int64_t, T*, T);                                              \
  template void launch_scale_by_device_factor<T>(cudaStream_t, std::int64_t, T*, const double*, bool);
WF_INSTANTIATE_ELEMENTWISE_LAUNCHERS(float)
WF_INSTANTIATE_ELEMENTWISE_LAUNCHERS(double)
#undef WF_INSTANTIATE_ELEMENTWISE_LAUNCHERS

}  // namespace wf::kernels::cuda
