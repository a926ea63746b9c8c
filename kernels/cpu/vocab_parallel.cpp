#include "kernels/cpu/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel_for.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

void check_shard(const char* what, std::int64_t rows, std::int64_t k, std::int64_t own) {
  WF_CHECK(rows >= 0 && k >= 0 && own >= 0 && own <= k,
           "{}: need rows >= 0 and 0 <= own <= k, got rows={} k={} own={}", what, rows, k, own);
}

}  // namespace

template <class T>
void vocab_parallel_row_max(std::int64_t rows, std::int64_t k, std::int64_t own, const T* x, double* max) {
  check_shard("vocab_parallel_row_max", rows, k, own);
  parallel_for_rows(rows, own, [=](std::int64_t r) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < own; ++j) m = std::max(m, static_cast<double>(x[r * k + j]));
    max[r] = m;
  });
}

template <class T>
void vocab_parallel_partials(std::int64_t rows, std::int64_t k, std::int64_t own, std::int64_t start, const T* x,
                             const double* max, const std::int64_t* targets, std::int64_t ignore_index,
                             double* sums) {
  check_shard("vocab_parallel_partials", rows, k, own);
  double* target_logit = sums + rows;
  parallel_for_rows(rows, own, [=](std::int64_t r) {
    double s = 0.0;
    for (std::int64_t j = 0; j < own; ++j) s += std::exp(static_cast<double>(x[r * k + j]) - max[r]);
    sums[r] = s;
    const std::int64_t t = targets[r] - start;
    target_logit[r] = targets[r] != ignore_index && t >= 0 && t < k ? static_cast<double>(x[r * k + t]) : 0.0;
  });
}

void vocab_parallel_loss(std::int64_t rows, const double* max, const double* sums, const std::int64_t* targets,
                         std::int64_t ignore_index, const std::int64_t* count, double* lse, double* loss) {
  WF_CHECK(rows >= 0, "vocab_parallel_loss: rows must be non-negative, got {}", rows);
  const double* target_logit = sums + rows;
  double total = 0.0;  // in row order, as the single-device kernel sums
  for (std::int64_t r = 0; r < rows; ++r) {
    lse[r] = max[r] + std::log(sums[r]);
    if (targets[r] != ignore_index) total += lse[r] - target_logit[r];
  }
  // The mean of no targets is 0, as wf::cross_entropy defines it (and the gradient is 0).
  *loss = count == nullptr ? total : *count > 0 ? total / double(*count) : 0.0;
}

template <class T>
void vocab_parallel_backward(std::int64_t rows, std::int64_t k, std::int64_t own, std::int64_t start, const T* x,
                             const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                             double grad_scale, T* dx) {
  check_shard("vocab_parallel_backward", rows, k, own);
  parallel_for_rows(rows, k, [=](std::int64_t r) {
    T* d = dx + r * k;
    std::fill(d, d + k, T(0));  // ignored rows and padding columns
    if (targets[r] == ignore_index) return;
    for (std::int64_t j = 0; j < own; ++j) {
      d[j] = static_cast<T>(std::exp(static_cast<double>(x[r * k + j]) - lse[r]) * grad_scale);
    }
    // p - 1 as expm1, like the single-device kernel: near 1 the difference would round away.
    const std::int64_t t = targets[r] - start;
    if (t >= 0 && t < k) d[t] = static_cast<T>(std::expm1(static_cast<double>(x[r * k + t]) - lse[r]) * grad_scale);
  });
}

void vocab_parallel_local_ids(const char* what, std::int64_t n, std::int64_t vocab, std::int64_t start,
                              std::int64_t rows, const std::int64_t* ids, std::int64_t* local, double* mask) {
  WF_CHECK(n >= 0 && vocab >= 0 && rows >= 0, "{}: sizes must be non-negative, got n={} vocab={} rows={}", what, n,
           vocab, rows);
  for (std::int64_t i = 0; i < n; ++i) {  // serially, before the parallel loop: an exception must not escape it
    WF_CHECK(ids[i] >= 0 && ids[i] < vocab, "{}: id {} at flat index {} is outside [0, {})", what, ids[i], i, vocab);
  }
  parallel_for_rows(n, 1, [=](std::int64_t i) {
    const bool mine = ids[i] >= start && ids[i] < start + rows;
    local[i] = mine ? ids[i] - start : 0;
    mask[i] = mine ? 1.0 : 0.0;
  });
}

#define WF_INSTANTIATE_VOCAB_PARALLEL(T)                                                                            \
  template void vocab_parallel_row_max<T>(std::int64_t, std::int64_t, std::int64_t, const T*, double*);           \
  template void vocab_parallel_partials<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*,     \
                                           const double*, const std::int64_t*, std::int64_t, double*);           \
  template void vocab_parallel_backward<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*,     \
                                           const std::int64_t*, std::int64_t, const double*, double, T*);
WF_INSTANTIATE_VOCAB_PARALLEL(float)
WF_INSTANTIATE_VOCAB_PARALLEL(double)
#undef WF_INSTANTIATE_VOCAB_PARALLEL

}  // namespace wf::kernels::cpu
