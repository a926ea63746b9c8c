#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"

namespace wf::kernels::cpu {
namespace {

void check_size(const char* who, std::int64_t n) {
  WF_CHECK(n >= 0, "{}: element count must be non-negative, got {}", who, n);
}
void check_rows_cols(const char* who, std::int64_t rows, std::int64_t cols) {
  WF_CHECK(rows >= 0 && cols >= 0, "{}: rows and cols must be non-negative, got [{}, {}]", who,
           rows, cols);
}

// ---- broadcasting ----------------------------------------------------------------------------

// Calls body(f) with f the scalar function of op, so the loops are compiled once per op.
template <class T, class Body>
void with_binary_op(BinaryOp op, Body body) {
  switch (op) {
    case BinaryOp::add: return body([](T x, T y) { return x + y; });
    case BinaryOp::sub: return body([](T x, T y) { return x - y; });
    case BinaryOp::mul: return body([](T x, T y) { return x * y; });
    case BinaryOp::div: return body([](T x, T y) { return x / y; });
  }
  WF_FAIL("binary_broadcast: unknown BinaryOp {}", static_cast<int>(op));
}

std::vector<std::int64_t> as_vector(const std::int64_t* shape, int ndim) {
  return ndim == 0 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>(shape, shape + ndim);
}

void check_broadcast(const char* who, const std::int64_t* a_shape, const std::int64_t* b_shape,
                     const std::int64_t* out_shape, int ndim) {
  WF_CHECK(ndim >= 0, "{}: ndim must be non-negative, got {}", who, ndim);
  for (int d = 0; d < ndim; ++d) {
    const std::int64_t o = out_shape[d], a = a_shape[d], b = b_shape[d];
    WF_CHECK(o >= 0 && (a == o || a == 1) && (b == o || b == 1),
             "{}: shapes {} and {} do not broadcast to {} (dim {}: each input extent must be 1 "
             "or equal the output's)",
             who, as_vector(a_shape, ndim), as_vector(b_shape, ndim), as_vector(out_shape, ndim), d);
  }
}

std::int64_t numel_of(const std::int64_t* shape, int ndim) {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

// The iteration space of a broadcast op after merging neighbouring dims in which each operand
// is either read in both or broadcast in both. Equal shapes collapse to one dim, a bias to
// [rows, cols] with b stride (0, 1), a scalar to one dim with stride 0: the fast paths fall out
// of the general loop instead of being special-cased.
struct BroadcastPlan {
  std::vector<std::int64_t> extent, a_stride, b_stride;  // row-major, at least one dim
};

BroadcastPlan plan_broadcast(const std::int64_t* a_shape, const std::int64_t* b_shape,
                             const std::int64_t* out_shape, int ndim) {
  std::vector<std::int64_t> extent;
  std::vector<bool> a_read, b_read;
  for (int d = 0; d < ndim; ++d) {
    if (out_shape[d] == 1) continue;  // contributes nothing to any offset
    const bool ar = a_shape[d] != 1, br = b_shape[d] != 1;
    if (!extent.empty() && a_read.back() == ar && b_read.back() == br) {
      extent.back() *= out_shape[d];
    } else {
      extent.push_back(out_shape[d]);
      a_read.push_back(ar);
      b_read.push_back(br);
    }
  }
  if (extent.empty()) {  // every operand is a single element
    extent.push_back(1);
    a_read.push_back(true);
    b_read.push_back(true);
  }
  BroadcastPlan plan{extent, std::vector<std::int64_t>(extent.size()),
                     std::vector<std::int64_t>(extent.size())};
  std::int64_t a_step = 1, b_step = 1;
  for (std::size_t d = extent.size(); d-- > 0;) {
    plan.a_stride[d] = a_read[d] ? a_step : 0;
    plan.b_stride[d] = b_read[d] ? b_step : 0;
    if (a_read[d]) a_step *= extent[d];
    if (b_read[d]) b_step *= extent[d];
  }
  return plan;
}

// out[j] = f(a[j·sa], b[j·sb]) for a run along the innermost dim, whose strides are 0 or 1.
template <class T, class F>
inline void broadcast_run(F f, const T* a, std::int64_t sa, const T* b, std::int64_t sb, T* out,
                          std::int64_t len) {
  if (sa == 1 && sb == 1) {
    for (std::int64_t j = 0; j < len; ++j) out[j] = f(a[j], b[j]);
  } else if (sa == 1) {
    const T bv = *b;
    for (std::int64_t j = 0; j < len; ++j) out[j] = f(a[j], bv);
  } else if (sb == 1) {
    const T av = *a;
    for (std::int64_t j = 0; j < len; ++j) out[j] = f(av, b[j]);
  } else {
    std::fill(out, out + len, f(*a, *b));
  }
}

// Walks output elements [begin, end) of the plan in row-major order, one innermost run at a time.
template <class T, class F>
void broadcast_range(F f, const BroadcastPlan& p, const T* a, const T* b, T* out,
                     std::int64_t begin, std::int64_t end) {
  const std::size_t nd = p.extent.size();
  std::vector<std::int64_t> index(nd);
  std::int64_t rest = begin;
  for (std::size_t d = nd; d-- > 0;) {
    index[d] = rest % p.extent[d];
    rest /= p.extent[d];
  }
  const std::int64_t inner = p.extent[nd - 1];
  for (std::int64_t pos = begin; pos < end;) {
    std::int64_t a_off = 0, b_off = 0;
    for (std::size_t d = 0; d < nd; ++d) {
      a_off += index[d] * p.a_stride[d];
      b_off += index[d] * p.b_stride[d];
    }
    const std::int64_t len = std::min(inner - index[nd - 1], end - pos);
    broadcast_run(f, a + a_off, p.a_stride[nd - 1], b + b_off, p.b_stride[nd - 1], out + pos, len);
    pos += len;
    index[nd - 1] += len;
    for (std::size_t d = nd - 1; d > 0 && index[d] == p.extent[d]; --d) {  // carry
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// ---- activations -----------------------------------------------------------------------------

template <class T>
struct Gelu {
  static constexpr T kSqrt2OverPi = T(0.7978845608028654);  // √(2/π)
  static constexpr T kCubic = T(0.044715);
  static T forward(T x) {
    const T t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    return T(0.5) * x * (T(1) + t);
  }
  static T derivative(T x) {
    const T t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    const T dt_dx = kSqrt2OverPi * (T(1) + T(3) * kCubic * x * x) * (T(1) - t * t);
    return T(0.5) * (T(1) + t) + T(0.5) * x * dt_dx;
  }
};

// The f32 GELU, the same formulas over SIMD lanes with simd::tanh (a scalar libm tanh per
// element was a quarter of a small GPT's training step). f64 keeps the scalar std::tanh above.
namespace gelu_simd {
using simd::FloatLanes;

template <int W>
[[gnu::always_inline]] inline FloatLanes<W> tanh_arg(const FloatLanes<W>& x) {
  return Gelu<float>::kSqrt2OverPi * (x + Gelu<float>::kCubic * x * x * x);
}
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> forward(const FloatLanes<W>& x) {
  return 0.5f * x * (1.0f + simd::tanh<W>(tanh_arg<W>(x)));
}
template <int W>
[[gnu::always_inline]] inline FloatLanes<W> backward(const FloatLanes<W>& x, const FloatLanes<W>& dy) {
  const FloatLanes<W> t = simd::tanh<W>(tanh_arg<W>(x));
  const FloatLanes<W> dt_dx = Gelu<float>::kSqrt2OverPi * (1.0f + 3.0f * Gelu<float>::kCubic * x * x) * (1.0f - t * t);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * dt_dx);
}

// y = f(x) (and dx = f(x, dy)) over [0, n): whole vectors, then one partial vector.
template <int W>
[[gnu::always_inline]] inline void forward_span(std::int64_t n, const float* x, float* y) {
  std::int64_t j = 0;
  for (; j + W <= n; j += W) simd::store<W>(y + j, forward<W>(simd::load<W>(x + j)));
  if (j < n) simd::store<W>(y + j, forward<W>(simd::load<W>(x + j, n - j)), n - j);
}
template <int W>
[[gnu::always_inline]] inline void backward_span(std::int64_t n, const float* x, const float* dy, float* dx) {
  std::int64_t j = 0;
  for (; j + W <= n; j += W) simd::store<W>(dx + j, backward<W>(simd::load<W>(x + j), simd::load<W>(dy + j)));
  if (j < n) simd::store<W>(dx + j, backward<W>(simd::load<W>(x + j, n - j), simd::load<W>(dy + j, n - j)), n - j);
}

struct Kernels {
  void (*forward)(std::int64_t, const float*, float*);
  void (*backward)(std::int64_t, const float*, const float*, float*);
};
#define WF_GELU_KERNELS(name, lanes, isa)                                                                      \
  WF_SIMD_TARGET(isa) void forward_##name(std::int64_t n, const float* x, float* y) {                          \
    forward_span<lanes>(n, x, y);                                                                              \
  }                                                                                                            \
  WF_SIMD_TARGET(isa) void backward_##name(std::int64_t n, const float* x, const float* dy, float* dx) {       \
    backward_span<lanes>(n, x, dy, dx);                                                                        \
  }                                                                                                            \
  constexpr Kernels kKernels_##name{forward_##name, backward_##name};
WF_SIMD_FOR_EACH_ISA(WF_GELU_KERNELS)
#undef WF_GELU_KERNELS

const Kernels& kernels() {
  static const Kernels picked = WF_SIMD_PICK(kKernels_);
  return picked;
}
}  // namespace gelu_simd

// Elements per parallel block of the SIMD kernels: long runs, a few per thread on large arrays.
constexpr std::int64_t kSimdBlock = 4096;

template <class T>
struct Silu {
  static T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }  // exp overflow gives 0, fine
  static T forward(T x) { return x * sigmoid(x); }
  static T derivative(T x) {
    const T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
};

}  // namespace

template <class T>
void binary_broadcast(BinaryOp op, const T* a, const std::int64_t* a_shape, const T* b,
                      const std::int64_t* b_shape, T* out, const std::int64_t* out_shape, int ndim) {
  check_broadcast("binary_broadcast", a_shape, b_shape, out_shape, ndim);
  const std::int64_t n = numel_of(out_shape, ndim);
  if (n == 0) return;
  const bool same_shapes = std::equal(a_shape, a_shape + ndim, out_shape) &&
                           std::equal(b_shape, b_shape + ndim, out_shape);
  with_binary_op<T>(op, [&](auto f) {
    if (same_shapes) {
      parallel_for_each(n, [&](std::int64_t i) { out[i] = f(a[i], b[i]); });
      return;
    }
    const BroadcastPlan plan = plan_broadcast(a_shape, b_shape, out_shape, ndim);
    // Fixed-size blocks, so small outputs stay on one thread and long rows still split.
    constexpr std::int64_t kBlock = 8192;
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      broadcast_range(f, plan, a, b, out, blk * kBlock, std::min(n, (blk + 1) * kBlock));
    }
  });
}

template <class T>
void binary_broadcast_reference(BinaryOp op, const T* a, const std::int64_t* a_shape, const T* b,
                                const std::int64_t* b_shape, T* out,
                                const std::int64_t* out_shape, int ndim) {
  check_broadcast("binary_broadcast_reference", a_shape, b_shape, out_shape, ndim);
  const std::int64_t n = numel_of(out_shape, ndim);
  std::vector<std::int64_t> index(ndim);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i;
    for (int d = ndim - 1; d >= 0; --d) {
      index[d] = rest % out_shape[d];
      rest /= out_shape[d];
    }
    std::int64_t ai = 0, bi = 0;  // row-major offsets, index 0 along broadcast dims
    for (int d = 0; d < ndim; ++d) {
      ai = ai * a_shape[d] + (a_shape[d] == 1 ? 0 : index[d]);
      bi = bi * b_shape[d] + (b_shape[d] == 1 ? 0 : index[d]);
    }
    const T x = a[ai], y = b[bi];
    switch (op) {
      case BinaryOp::add: out[i] = x + y; break;
      case BinaryOp::sub: out[i] = x - y; break;
      case BinaryOp::mul: out[i] = x * y; break;
      case BinaryOp::div: out[i] = x / y; break;
    }
  }
}

template <class T>
void scale(std::int64_t n, T alpha, const T* x, T* out) {
  check_size("scale", n);
  parallel_for_each(n, [=](std::int64_t i) { out[i] = alpha * x[i]; });
}

template <class T>
void add_scaled(std::int64_t n, T alpha, const T* x, T* y) {
  check_size("add_scaled", n);
  parallel_for_each(n, [=](std::int64_t i) { y[i] += alpha * x[i]; });
}

template <class T>
void add_bias(std::int64_t rows, std::int64_t cols, const T* x, const T* bias, T* out) {
  check_rows_cols("add_bias", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* xr = x + r * cols;
    T* o = out + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) o[c] = xr[c] + bias[c];
  });
}

template <class T>
void residual_add(std::int64_t n, const T* x, const T* residual, T* out) {
  check_size("residual_add", n);
  parallel_for_each(n, [=](std::int64_t i) { out[i] = x[i] + residual[i]; });
}

template <class T>
void bias_residual_add(std::int64_t rows, std::int64_t cols, const T* x, const T* bias,
                       const T* residual, T* out) {
  check_rows_cols("bias_residual_add", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const std::int64_t base = r * cols;
    for (std::int64_t c = 0; c < cols; ++c) out[base + c] = x[base + c] + bias[c] + residual[base + c];
  });
}

template <class T>
void gelu_forward(std::int64_t n, const T* x, T* y) {
  check_size("gelu_forward", n);
  if constexpr (std::is_same_v<T, float>) {
    const auto forward = gelu_simd::kernels().forward;
    parallel_for_blocks(n, kSimdBlock, [=](std::int64_t b, std::int64_t e) { forward(e - b, x + b, y + b); });
  } else {
    parallel_for_each(n, [=](std::int64_t i) { y[i] = Gelu<T>::forward(x[i]); });
  }
}

template <class T>
void gelu_backward(std::int64_t n, const T* x, const T* dy, T* dx) {
  check_size("gelu_backward", n);
  if constexpr (std::is_same_v<T, float>) {
    const auto backward = gelu_simd::kernels().backward;
    parallel_for_blocks(n, kSimdBlock,
                        [=](std::int64_t b, std::int64_t e) { backward(e - b, x + b, dy + b, dx + b); });
  } else {
    parallel_for_each(n, [=](std::int64_t i) { dx[i] = dy[i] * Gelu<T>::derivative(x[i]); });
  }
}

template <class T>
void silu_forward(std::int64_t n, const T* x, T* y) {
  check_size("silu_forward", n);
  parallel_for_each(n, [=](std::int64_t i) { y[i] = Silu<T>::forward(x[i]); });
}

template <class T>
void silu_backward(std::int64_t n, const T* x, const T* dy, T* dx) {
  check_size("silu_backward", n);
  parallel_for_each(n, [=](std::int64_t i) { dx[i] = dy[i] * Silu<T>::derivative(x[i]); });
}

template <class T>
void exp_forward(std::int64_t n, const T* x, T* y) {
  check_size("exp_forward", n);
  parallel_for_each(n, [=](std::int64_t i) { y[i] = std::exp(x[i]); });
}

template <class T>
void ln_forward(std::int64_t n, const T* x, T* y) {
  check_size("ln_forward", n);
  parallel_for_each(n, [=](std::int64_t i) { y[i] = std::log(x[i]); });
}

template <class T>
void tanh_forward(std::int64_t n, const T* x, T* y) {
  check_size("tanh_forward", n);
  parallel_for_each(n, [=](std::int64_t i) { y[i] = std::tanh(x[i]); });
}

template <class T>
void tanh_backward(std::int64_t n, const T* y, const T* dy, T* dx) {
  check_size("tanh_backward", n);
  parallel_for_each(n, [=](std::int64_t i) { dx[i] = dy[i] * (1 - y[i] * y[i]); });
}

template <class T>
void affine(std::int64_t n, T alpha, T shift, const T* x, T* out) {
  if (shift == T(0)) return scale(n, alpha, x, out);
  check_size("affine", n);
  parallel_for_each(n, [=](std::int64_t i) { out[i] = alpha * x[i] + shift; });
}

template <class T>
void dropout_mask(std::int64_t n, double p, std::uint64_t seed, std::uint64_t first, const DropoutLayout& layout,
                  const T* x, T* out) {
  check_size("dropout_mask", n);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  parallel_for_each(n, [&](std::int64_t k) {
    const bool keep = uniform_at(seed, first + layout.whole_index(static_cast<std::uint64_t>(k))) >= p;
    out[k] = keep ? x[k] * keep_scale : T(0);
  });
}

#define WF_INSTANTIATE_ELEMENTWISE(T)                                                              \
  template void binary_broadcast<T>(BinaryOp, const T*, const std::int64_t*, const T*,            \
                                    const std::int64_t*, T*, const std::int64_t*, int);           \
  template void binary_broadcast_reference<T>(BinaryOp, const T*, const std::int64_t*, const T*,  \
                                              const std::int64_t*, T*, const std::int64_t*, int); \
  template void scale<T>(std::int64_t, T, const T*, T*);                                          \
  template void add_scaled<T>(std::int64_t, T, const T*, T*);                                     \
  template void add_bias<T>(std::int64_t, std::int64_t, const T*, const T*, T*);                  \
  template void residual_add<T>(std::int64_t, const T*, const T*, T*);                            \
  template void bias_residual_add<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, T*); \
  template void gelu_forward<T>(std::int64_t, const T*, T*);                                      \
  template void gelu_backward<T>(std::int64_t, const T*, const T*, T*);                           \
  template void silu_forward<T>(std::int64_t, const T*, T*);                                      \
  template void silu_backward<T>(std::int64_t, const T*, const T*, T*);                           \
  template void exp_forward<T>(std::int64_t, const T*, T*);                                       \
  template void ln_forward<T>(std::int64_t, const T*, T*);                                        \
  template void tanh_forward<T>(std::int64_t, const T*, T*);                                      \
  template void tanh_backward<T>(std::int64_t, const T*, const T*, T*);                           \
  template void affine<T>(std::int64_t, T, T, const T*, T*);                                      \
  template void dropout_mask<T>(std::int64_t, double, std::uint64_t, std::uint64_t, const DropoutLayout&, \
                                const T*, T*);
WF_INSTANTIATE_ELEMENTWISE(float)
WF_INSTANTIATE_ELEMENTWISE(double)
#undef WF_INSTANTIATE_ELEMENTWISE

}  // namespace wf::kernels::cpu
