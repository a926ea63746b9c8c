#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

// Output columns accumulated together when the innermost dim is kept: long enough to stream
// whole cache lines of each input row, short enough for the double accumulators to stay in L1.
constexpr std::int64_t kColumnBlock = 128;
// Full reductions are summed in chunks of this many elements, then the chunk sums in order.
// The chunking depends only on n, so the result is the same for any number of threads.
constexpr std::int64_t kSumChunk = std::int64_t{1} << 14;

// Σ term(i), i in [0, n), with eight interleaved double accumulators (so the adds pipeline)
// combined in a fixed order.
template <class Term>
double lane_sum(std::int64_t n, Term term) {
  double lane[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += term(i + l);
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += term(i);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) +
         tail;
}

// Σ term(i) over a long range: fixed chunks summed in parallel, then their sums in order.
template <class Term>
double chunked_sum(std::int64_t n, Term term) {
  if (n <= kSumChunk) return lane_sum(n, term);
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kSumChunk;
    partial[c] = lane_sum(std::min(kSumChunk, n - begin), [&](std::int64_t i) { return term(begin + i); });
  }
  return lane_sum(chunks, [&](std::int64_t c) { return partial[c]; });
}

// A sum over some dims of a contiguous row-major array, after dropping extent-1 dims and
// merging neighbours that are both kept or both summed. The trailing run of kept dims becomes
// `inner` (contiguous in input and output, so it is accumulated a block of columns at a time);
// the other kept dims index the output, the summed dims are walked in row-major order.
struct SumPlan {
  std::vector<std::int64_t> kept_extent, kept_stride;
  std::vector<std::int64_t> summed_extent, summed_stride;
  std::int64_t inner = 1;
};

SumPlan plan_sum(const std::int64_t* extent, const std::vector<bool>& summed, int ndim) {
  std::vector<std::int64_t> ext;
  std::vector<bool> sum;
  for (int d = 0; d < ndim; ++d) {
    if (extent[d] == 1) continue;
    if (!ext.empty() && sum.back() == summed[d]) {
      ext.back() *= extent[d];
    } else {
      ext.push_back(extent[d]);
      sum.push_back(summed[d]);
    }
  }
  SumPlan plan;
  if (!ext.empty() && !sum.back()) {
    plan.inner = ext.back();
    ext.pop_back();
    sum.pop_back();
  }
  std::int64_t stride = plan.inner;
  std::vector<std::int64_t> strides(ext.size());
  for (std::size_t d = ext.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= ext[d];
  }
  for (std::size_t d = 0; d < ext.size(); ++d) {
    (sum[d] ? plan.summed_extent : plan.kept_extent).push_back(ext[d]);
    (sum[d] ? plan.summed_stride : plan.kept_stride).push_back(strides[d]);
  }
  return plan;
}

std::int64_t product(const std::vector<std::int64_t>& v) {
  std::int64_t p = 1;
  for (std::int64_t e : v) p *= e;
  return p;
}

// Offset of the idx-th element of a row-major index space with the given extents and strides.
std::int64_t offset_of(std::int64_t idx, const std::vector<std::int64_t>& extent,
                       const std::vector<std::int64_t>& stride) {
  std::int64_t off = 0;
  for (std::size_t d = extent.size(); d-- > 0;) {
    off += (idx % extent[d]) * stride[d];
    idx /= extent[d];
  }
  return off;
}

// out = (Σ over the summed dims) · scale, one output block per task, each summed in a fixed order.
template <class T>
void run_sum(const SumPlan& p, const T* x, T* out, double scale) {
  const std::int64_t kept = product(p.kept_extent);
  const std::int64_t summed = product(p.summed_extent);
  if (kept == 0 || p.inner == 0) return;
  if (kept == 1 && p.inner == 1 && p.summed_extent.size() <= 1) {  // everything into one number
    out[0] = static_cast<T>(chunked_sum(summed, [x](std::int64_t i) { return double(x[i]); }) * scale);
    return;
  }
  // Summed dims split as (all but the last) × last; the last is contiguous when inner == 1.
  std::vector<std::int64_t> outer_ext(p.summed_extent), outer_str(p.summed_stride);
  std::int64_t last_ext = 1, last_str = 0;
  if (!outer_ext.empty()) {
    last_ext = outer_ext.back();
    last_str = outer_str.back();
    outer_ext.pop_back();
    outer_str.pop_back();
  }
  const std::int64_t outer_count = product(outer_ext);
  const std::int64_t blocks = (p.inner + kColumnBlock - 1) / kColumnBlock;
  const std::int64_t tasks = kept * blocks;
  const double work = double(kept) * double(p.inner) * double(summed);
#pragma omp parallel for schedule(static) if (work > double(kParallelElements))
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t k = t / blocks;
    const std::int64_t col = (t % blocks) * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, p.inner - col);
    const T* base = x + offset_of(k, p.kept_extent, p.kept_stride) + col;
    double acc[kColumnBlock] = {};
    for (std::int64_t o = 0; o < outer_count; ++o) {
      const T* row = base + offset_of(o, outer_ext, outer_str);
      if (width == 1 && last_str == 1) {
        acc[0] += lane_sum(last_ext, [row](std::int64_t r) { return double(row[r]); });
      } else {
        for (std::int64_t r = 0; r < last_ext; ++r) {
          const T* v = row + r * last_str;
          for (std::int64_t j = 0; j < width; ++j) acc[j] += double(v[j]);
        }
      }
    }
    T* dst = out + k * p.inner + col;
    for (std::int64_t j = 0; j < width; ++j) dst[j] = static_cast<T>(acc[j] * scale);
  }
}

void check_dims(const char* who, std::int64_t outer, std::int64_t dim, std::int64_t inner) {
  WF_CHECK(outer >= 0 && dim >= 0 && inner >= 0,
           "{}: outer, dim and inner must be non-negative, got [{}, {}, {}]", who, outer, dim, inner);
}

template <class T>
void sum_dim_scaled(const char* who, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                    const T* x, T* out, double scale) {
  check_dims(who, outer, dim, inner);
  const std::int64_t extent[3] = {outer, dim, inner};
  run_sum(plan_sum(extent, {false, true, false}, 3), x, out, scale);
}

std::vector<std::int64_t> as_vector(const std::int64_t* shape, int ndim) {
  return ndim == 0 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>(shape, shape + ndim);
}

// a takes b's place as the maximum: larger, or a NaN (which propagates) replacing a number.
template <class T>
bool beats(T a, T b) {
  return a > b || (std::isnan(a) && !std::isnan(b));
}

}  // namespace

template <class T>
void sum_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out) {
  sum_dim_scaled("sum_dim", outer, dim, inner, x, out, 1.0);
}

template <class T>
void mean_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out) {
  // dim == 0: a sum of 0 times 1/0 = inf is NaN, the mean of nothing.
  sum_dim_scaled("mean_dim", outer, dim, inner, x, out, 1.0 / double(dim));
}

template <class T>
void max_dim(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* out_values,
             std::int64_t* out_argmax) {
  check_dims("max_dim", outer, dim, inner);
  if (outer == 0 || inner == 0) return;
  WF_CHECK(dim > 0, "max_dim: cannot take the max over an empty dim ([{}, {}, {}]); the maximum "
           "of nothing is undefined", outer, dim, inner);
  const std::int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (outer * dim * inner > kParallelElements)
  for (std::int64_t t = 0; t < outer * blocks; ++t) {
    const std::int64_t o = t / blocks;
    const std::int64_t col = (t % blocks) * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, inner - col);
    const T* base = x + o * dim * inner + col;
    T best[kColumnBlock];
    std::int64_t arg[kColumnBlock] = {};
    std::copy(base, base + width, best);
    for (std::int64_t d = 1; d < dim; ++d) {
      const T* row = base + d * inner;
      for (std::int64_t j = 0; j < width; ++j) {
        if (beats(row[j], best[j])) {
          best[j] = row[j];
          arg[j] = d;
        }
      }
    }
    std::copy(best, best + width, out_values + o * inner + col);
    if (out_argmax != nullptr) std::copy(arg, arg + width, out_argmax + o * inner + col);
  }
}

template <class T>
double sum_all(std::int64_t n, const T* x) {
  WF_CHECK(n >= 0, "sum_all: element count must be non-negative, got {}", n);
  return chunked_sum(n, [x](std::int64_t i) { return double(x[i]); });
}

template <class T>
double sum_of_products(std::int64_t n, const T* x, const T* y) {
  WF_CHECK(n >= 0, "sum_of_products: element count must be non-negative, got {}", n);
  return chunked_sum(n, [x, y](std::int64_t i) { return double(x[i]) * double(y[i]); });
}

template <class T>
void reduce_broadcast(const T* grad, const std::int64_t* out_shape, T* result,
                      const std::int64_t* in_shape, int ndim) {
  WF_CHECK(ndim >= 0, "reduce_broadcast: ndim must be non-negative, got {}", ndim);
  std::vector<bool> summed(ndim);
  for (int d = 0; d < ndim; ++d) {
    WF_CHECK(out_shape[d] >= 0 && (in_shape[d] == out_shape[d] || in_shape[d] == 1),
             "reduce_broadcast: cannot sum a gradient of shape {} down to shape {} (dim {}: the "
             "input extent must be 1 or equal the output's)",
             as_vector(out_shape, ndim), as_vector(in_shape, ndim), d);
    summed[d] = in_shape[d] == 1 && out_shape[d] != 1;
  }
  run_sum(plan_sum(out_shape, summed, ndim), grad, result, 1.0);
}

template <class T>
void max_dim_backward(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* grad,
                      const std::int64_t* argmax, T* dx) {
  check_dims("max_dim_backward", outer, dim, inner);
  std::fill(dx, dx + outer * dim * inner, T(0));
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::int64_t k = o * inner + i;
      dx[(o * dim + argmax[k]) * inner + i] = grad[k];
    }
  }
}

#define WF_INSTANTIATE_REDUCE(T)                                                               \
  template void sum_dim<T>(std::int64_t, std::int64_t, std::int64_t, const T*, T*);           \
  template void mean_dim<T>(std::int64_t, std::int64_t, std::int64_t, const T*, T*);          \
  template void max_dim_backward<T>(std::int64_t, std::int64_t, std::int64_t, const T*, const std::int64_t*, T*); \
  template void max_dim<T>(std::int64_t, std::int64_t, std::int64_t, const T*, T*,            \
                           std::int64_t*);                                                    \
  template double sum_all<T>(std::int64_t, const T*);                                         \
  template double sum_of_products<T>(std::int64_t, const T*, const T*);                       \
  template void reduce_broadcast<T>(const T*, const std::int64_t*, T*, const std::int64_t*, int);
WF_INSTANTIATE_REDUCE(float)
WF_INSTANTIATE_REDUCE(double)
#undef WF_INSTANTIATE_REDUCE

}  // namespace wf::kernels::cpu
