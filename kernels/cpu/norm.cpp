#include "kernels/cpu/norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

namespace {

// LayerNorm and RMSNorm are one computation: RMSNorm is LayerNorm with the mean pinned to 0
// and no bias. Both share the code below, switched by this tag at compile time.
enum class NormKind { layer, rms };

// Enough chunks to keep every core of a large node busy, few enough that the per-chunk
// partials (kMaxChunks x cols doubles per summed parameter) stay small.
constexpr std::int64_t kMaxChunks = 64;

void check_sizes(const char* what, std::int64_t rows, std::int64_t cols, double eps) {
  WF_CHECK(rows >= 0 && cols >= 0, "{}: sizes must be non-negative, got rows={} cols={}", what, rows, cols);
  WF_CHECK(eps >= 0.0, "{}: eps must be >= 0, got {}", what, eps);
}

// The fused residual add's operands: without them the entry would be the plain norm and leave sum
// unwritten (empty arrays may have no storage).
void check_residual(const char* what, std::int64_t rows, std::int64_t cols, const void* branch, const void* sum) {
  WF_CHECK(rows * cols == 0 || (branch != nullptr && sum != nullptr),
           "{}: branch and sum are required (the norm without a residual add is the plain entry)", what);
}

double inverse_cols(std::int64_t cols) { return cols > 0 ? 1.0 / static_cast<double>(cols) : 0.0; }

struct RowStats {
  double mean;  // 0 for RMSNorm
  double rstd;
};

// Two passes in double: the mean, then the mean square about it (no E[x^2] - E[x]^2
// cancellation).
//
// Row sums here and below are `omp simd` reductions: they are split over the vector lanes in
// an order fixed at compile time, so they stay deterministic and independent of the thread
// count, while not being serialised on the latency of one add.
template <NormKind kKind, typename T>
RowStats row_stats(std::int64_t cols, const T* x, double eps) {
  const double inv_cols = inverse_cols(cols);
  double mean = 0.0;
  if constexpr (kKind == NormKind::layer) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < cols; ++j) sum += x[j];
    mean = sum * inv_cols;
  }
  double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
  for (std::int64_t j = 0; j < cols; ++j) {
    const double d = x[j] - mean;
    sum_sq += d * d;
  }
  return {mean, 1.0 / std::sqrt(sum_sq * inv_cols + eps)};
}

// With a branch (the fused residual add), the row normalised is sum = x + branch, added in T as the
// add op does and written out first: the statistics and y then read it back while it is in cache,
// instead of from memory in a second pass.
template <NormKind kKind, typename T>
void norm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* branch /*nullable*/,
                  const T* weight, const T* bias, double eps, T* sum /*with branch*/, T* y, T* mean_out,
                  T* rstd_out) {
#pragma omp parallel for if (rows * cols > 32768)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    if (branch != nullptr) {
      const T* br = branch + r * cols;
      T* sr = sum + r * cols;
#pragma omp simd
      for (std::int64_t j = 0; j < cols; ++j) sr[j] = xr[j] + br[j];
      xr = sr;
    }
    T* yr = y + r * cols;
    const RowStats s = row_stats<kKind>(cols, xr, eps);
    if (mean_out != nullptr) mean_out[r] = static_cast<T>(s.mean);
    if (rstd_out != nullptr) rstd_out[r] = static_cast<T>(s.rstd);
    for (std::int64_t j = 0; j < cols; ++j) {
      double v = (xr[j] - s.mean) * s.rstd;
      if (weight != nullptr) v *= weight[j];
      if (bias != nullptr) v += bias[j];
      yr[j] = static_cast<T>(v);
    }
  }
}

// Calls row_fn(r, partials) once for every row, where partials[k] points at `cols` doubles
// private to the chunk of rows that r belongs to (null when sums[k] is null), then adds each
// column's chunk partials, in chunk order, into sums[k] (+=). The chunking depends only on
// `rows`, so the sums are bitwise independent of the thread count.
template <std::size_t kSums, typename T, typename RowFn>
void for_rows_summing_columns(std::int64_t rows, std::int64_t cols, std::array<T*, kSums> sums, RowFn&& row_fn) {
  const bool parallel = rows * cols > 32768;
  const std::int64_t chunks = std::min(rows, kMaxChunks);
  const bool any_sum = std::any_of(sums.begin(), sums.end(), [](T* s) { return s != nullptr; });
  std::vector<double> partials(any_sum ? static_cast<std::size_t>(chunks * kSums * cols) : 0, 0.0);
  auto partial = [&](std::int64_t chunk, std::size_t k) -> double* {
    return sums[k] == nullptr ? nullptr : partials.data() + (chunk * static_cast<std::int64_t>(kSums) + static_cast<std::int64_t>(k)) * cols;
  };

#pragma omp parallel for if (parallel) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::array<double*, kSums> mine;
    for (std::size_t k = 0; k < kSums; ++k) mine[k] = partial(c, k);
    for (std::int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; ++r) row_fn(r, mine);
  }

  for (std::size_t k = 0; k < kSums; ++k) {
    if (sums[k] == nullptr) continue;
#pragma omp parallel for if (chunks * cols > 32768)
    for (std::int64_t j = 0; j < cols; ++j) {
      double total = 0.0;
      for (std::int64_t c = 0; c < chunks; ++c) total += partial(c, k)[j];
      sums[k][j] = static_cast<T>(sums[k][j] + total);
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight and
// xhat = (x - mean) * rstd; for RMSNorm the mean(g) term drops out with the mean.
// With dsum_in (the fused residual add: x is the sum), dx = T(that) + dsum_in, added in T as the
// autograd engine adds two gradients of one tensor: the gradient the add hands to both operands.
template <NormKind kKind, typename T>
void norm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, const T* mean,
                   const T* rstd, const T* dy, const T* dsum_in /*nullable*/, T* dx, T* dweight, T* dbias) {
  const double inv_cols = inverse_cols(cols);
  for_rows_summing_columns<2>(rows, cols, std::array<T*, 2>{dweight, dbias},
                              [&](std::int64_t r, const std::array<double*, 2>& partial) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const double row_mean = kKind == NormKind::layer ? static_cast<double>(mean[r]) : 0.0;
    const double row_rstd = rstd[r];
    auto xhat = [&](std::int64_t j) { return (xr[j] - row_mean) * row_rstd; };
    auto g = [&](std::int64_t j) { return weight != nullptr ? static_cast<double>(dyr[j]) * weight[j] : dyr[j]; };

    double sum_g = 0.0, sum_g_xhat = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
    for (std::int64_t j = 0; j < cols; ++j) {
      sum_g += g(j);
      sum_g_xhat += g(j) * xhat(j);
    }
    const double mean_g = kKind == NormKind::layer ? sum_g * inv_cols : 0.0;
    const double mean_g_xhat = sum_g_xhat * inv_cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const T dx_norm = static_cast<T>(row_rstd * (g(j) - mean_g - xhat(j) * mean_g_xhat));
      dxr[j] = dsum_in != nullptr ? static_cast<T>(dx_norm + dsum_in[r * cols + j]) : dx_norm;
      if (partial[0] != nullptr) partial[0][j] += dyr[j] * xhat(j);
      if (partial[1] != nullptr) partial[1][j] += dyr[j];
    }
  });
}

}  // namespace

template <typename T>
void layernorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, const T* bias,
                       double eps, T* y, T* mean, T* rstd) {
  check_sizes("layernorm_forward", rows, cols, eps);
  norm_forward<NormKind::layer>(rows, cols, x, static_cast<const T*>(nullptr), weight, bias, eps,
                                static_cast<T*>(nullptr), y, mean, rstd);
}

template <typename T>
void layernorm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, const T* mean,
                        const T* rstd, const T* dy, T* dx, T* dweight, T* dbias) {
  check_sizes("layernorm_backward", rows, cols, 0.0);
  norm_backward<NormKind::layer>(rows, cols, x, weight, mean, rstd, dy, static_cast<const T*>(nullptr), dx, dweight,
                                 dbias);
}

template <typename T>
void rmsnorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, double eps, T* y,
                     T* rstd) {
  check_sizes("rmsnorm_forward", rows, cols, eps);
  norm_forward<NormKind::rms>(rows, cols, x, static_cast<const T*>(nullptr), weight, static_cast<const T*>(nullptr),
                              eps, static_cast<T*>(nullptr), y, static_cast<T*>(nullptr), rstd);
}

template <typename T>
void rmsnorm_backward(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, const T* rstd,
                      const T* dy, T* dx, T* dweight) {
  check_sizes("rmsnorm_backward", rows, cols, 0.0);
  norm_backward<NormKind::rms>(rows, cols, x, weight, static_cast<const T*>(nullptr), rstd, dy,
                               static_cast<const T*>(nullptr), dx, dweight, static_cast<T*>(nullptr));
}

template <typename T>
void add_layernorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* branch, const T* weight,
                           const T* bias, double eps, T* sum, T* y, T* mean, T* rstd) {
  check_sizes("add_layernorm_forward", rows, cols, eps);
  check_residual("add_layernorm_forward", rows, cols, branch, sum);
  norm_forward<NormKind::layer>(rows, cols, x, branch, weight, bias, eps, sum, y, mean, rstd);
}

template <typename T>
void add_layernorm_backward(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight, const T* mean,
                            const T* rstd, const T* dy, const T* dsum_in, T* dsum, T* dweight, T* dbias) {
  check_sizes("add_layernorm_backward", rows, cols, 0.0);
  norm_backward<NormKind::layer>(rows, cols, sum, weight, mean, rstd, dy, dsum_in, dsum, dweight, dbias);
}

template <typename T>
void add_rmsnorm_forward(std::int64_t rows, std::int64_t cols, const T* x, const T* branch, const T* weight,
                         double eps, T* sum, T* y, T* rstd) {
  check_sizes("add_rmsnorm_forward", rows, cols, eps);
  check_residual("add_rmsnorm_forward", rows, cols, branch, sum);
  norm_forward<NormKind::rms>(rows, cols, x, branch, weight, static_cast<const T*>(nullptr), eps, sum, y,
                              static_cast<T*>(nullptr), rstd);
}

template <typename T>
void add_rmsnorm_backward(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight, const T* rstd,
                          const T* dy, const T* dsum_in, T* dsum, T* dweight) {
  check_sizes("add_rmsnorm_backward", rows, cols, 0.0);
  norm_backward<NormKind::rms>(rows, cols, sum, weight, static_cast<const T*>(nullptr), rstd, dy, dsum_in, dsum,
                               dweight, static_cast<T*>(nullptr));
}

// ---- references ----------------------------------------------------------------------------
// Written out separately for each norm from the textbook formulas, row by row, in double.

template <typename T>
void layernorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                 const T* bias, double eps, T* y, T* mean, T* rstd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    double mu = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) mu += xr[j];
    mu = cols > 0 ? mu / static_cast<double>(cols) : 0.0;
    double var = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var = cols > 0 ? var / static_cast<double>(cols) : 0.0;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
      const double b = bias != nullptr ? static_cast<double>(bias[j]) : 0.0;
      y[r * cols + j] = static_cast<T>((xr[j] - mu) * rs * w + b);
    }
    if (mean != nullptr) mean[r] = static_cast<T>(mu);
    if (rstd != nullptr) rstd[r] = static_cast<T>(rs);
  }
}

template <typename T>
void layernorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                  const T* mean, const T* rstd, const T* dy, T* dx, T* dweight, T* dbias) {
  std::vector<double> dw(static_cast<std::size_t>(cols), 0.0), db(static_cast<std::size_t>(cols), 0.0);
  std::vector<double> xhat(static_cast<std::size_t>(cols)), dxhat(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) {
      xhat[j] = (static_cast<double>(x[r * cols + j]) - mean[r]) * rstd[r];
      dxhat[j] = static_cast<double>(dy[r * cols + j]) * (weight != nullptr ? static_cast<double>(weight[j]) : 1.0);
      mean_dxhat += dxhat[j] / static_cast<double>(cols);
      mean_dxhat_xhat += dxhat[j] * xhat[j] / static_cast<double>(cols);
      dw[j] += dy[r * cols + j] * xhat[j];
      db[j] += dy[r * cols + j];
    }
    for (std::int64_t j = 0; j < cols; ++j) {
      dx[r * cols + j] = static_cast<T>(rstd[r] * (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat));
    }
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    if (dweight != nullptr) dweight[j] = static_cast<T>(dweight[j] + dw[j]);
    if (dbias != nullptr) dbias[j] = static_cast<T>(dbias[j] + db[j]);
  }
}

template <typename T>
void rmsnorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight, double eps,
                               T* y, T* rstd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    double mean_sq = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) mean_sq += static_cast<double>(xr[j]) * xr[j];
    mean_sq = cols > 0 ? mean_sq / static_cast<double>(cols) : 0.0;
    const double rs = 1.0 / std::sqrt(mean_sq + eps);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
      y[r * cols + j] = static_cast<T>(xr[j] * rs * w);
    }
    if (rstd != nullptr) rstd[r] = static_cast<T>(rs);
  }
}

template <typename T>
void rmsnorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                                const T* rstd, const T* dy, T* dx, T* dweight) {
  std::vector<double> dw(static_cast<std::size_t>(cols), 0.0);
  std::vector<double> xhat(static_cast<std::size_t>(cols)), dxhat(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean_dxhat_xhat = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) {
      xhat[j] = static_cast<double>(x[r * cols + j]) * rstd[r];
      dxhat[j] = static_cast<double>(dy[r * cols + j]) * (weight != nullptr ? static_cast<double>(weight[j]) : 1.0);
      mean_dxhat_xhat += dxhat[j] * xhat[j] / static_cast<double>(cols);
      dw[j] += dy[r * cols + j] * xhat[j];
    }
    for (std::int64_t j = 0; j < cols; ++j) {
      dx[r * cols + j] = static_cast<T>(rstd[r] * (dxhat[j] - xhat[j] * mean_dxhat_xhat));
    }
  }
  if (dweight != nullptr) {
    for (std::int64_t j = 0; j < cols; ++j) dweight[j] = static_cast<T>(dweight[j] + dw[j]);
  }
}

// The fused residual add: the add, then the norm's own reference (and its backward, then the add's).
namespace {
template <typename T>
void add_rows_reference(std::int64_t n, const T* a, const T* b, T* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

template <typename T>
void add_layernorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                                     const T* weight, const T* bias, double eps, T* sum, T* y, T* mean, T* rstd) {
  add_rows_reference(rows * cols, x, branch, sum);
  layernorm_forward_reference(rows, cols, sum, weight, bias, eps, y, mean, rstd);
}

template <typename T>
void add_layernorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight,
                                      const T* mean, const T* rstd, const T* dy, const T* dsum_in, T* dsum,
                                      T* dweight, T* dbias) {
  layernorm_backward_reference(rows, cols, sum, weight, mean, rstd, dy, dsum, dweight, dbias);
  if (dsum_in != nullptr) add_rows_reference(rows * cols, static_cast<const T*>(dsum), dsum_in, dsum);
}

template <typename T>
void add_rmsnorm_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                                   const T* weight, double eps, T* sum, T* y, T* rstd) {
  add_rows_reference(rows * cols, x, branch, sum);
  rmsnorm_forward_reference(rows, cols, sum, weight, eps, y, rstd);
}

template <typename T>
void add_rmsnorm_backward_reference(std::int64_t rows, std::int64_t cols, const T* sum, const T* weight,
                                    const T* rstd, const T* dy, const T* dsum_in, T* dsum, T* dweight) {
  rmsnorm_backward_reference(rows, cols, sum, weight, rstd, dy, dsum, dweight);
  if (dsum_in != nullptr) add_rows_reference(rows * cols, static_cast<const T*>(dsum), dsum_in, dsum);
}

#define WF_INSTANTIATE_NORM(T)                                                                                 \
  template void layernorm_forward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, double, T*, T*, \
                                     T*);                                                                      \
  template void layernorm_backward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*,      \
                                      const T*, T*, T*, T*);                                                   \
  template void rmsnorm_forward<T>(std::int64_t, std::int64_t, const T*, const T*, double, T*, T*);           \
  template void rmsnorm_backward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*, T*,   \
                                    T*);                                                                       \
  template void layernorm_forward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,      \
                                               double, T*, T*, T*);                                            \
  template void layernorm_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,     \
                                                const T*, const T*, T*, T*, T*);                               \
  template void rmsnorm_forward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, double, T*, T*); \
  template void rmsnorm_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,       \
                                              const T*, T*, T*);                                             \
  template void add_layernorm_forward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*,  \
                                         double, T*, T*, T*, T*);                                              \
  template void add_layernorm_backward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*, \
                                          const T*, const T*, T*, T*, T*);                                     \
  template void add_rmsnorm_forward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, double, T*,  \
                                       T*, T*);                                                                \
  template void add_rmsnorm_backward<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*,   \
                                        const T*, T*, T*);                                                     \
  template void add_layernorm_forward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,  \
                                                   const T*, double, T*, T*, T*, T*);                          \
  template void add_layernorm_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, \
                                                    const T*, const T*, const T*, T*, T*, T*);                 \
  template void add_rmsnorm_forward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,    \
                                                 double, T*, T*, T*);                                          \
  template void add_rmsnorm_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, const T*,   \
                                                  const T*, const T*, T*, T*);
WF_INSTANTIATE_NORM(float)
WF_INSTANTIATE_NORM(double)
#undef WF_INSTANTIATE_NORM

}  // namespace wf::kernels::cpu
