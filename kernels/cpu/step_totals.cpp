#include "kernels/cpu/step_totals.h"

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

std::int64_t count_not_equal(std::int64_t n, const std::int64_t* x, std::int64_t value) {
  WF_CHECK(n >= 0, "count_not_equal: element count must be non-negative, got {}", n);
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += x[i] != value ? 1 : 0;  // branch-free: it vectorises
  return count;
}

std::int64_t count_not_equal_reference(std::int64_t n, const std::int64_t* x, std::int64_t value) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (x[i] != value) ++count;
  }
  return count;
}

void loss_normaliser(const double* totals, double* out) {
  const double normaliser = totals[1] > 0 ? 1.0 / totals[1] : 0.0;
  out[0] = normaliser;
  out[1] = totals[0] * normaliser;
}

void loss_normaliser_reference(const double* totals, double* out) {
  if (totals[1] > 0) {
    out[0] = 1.0 / totals[1];
    out[1] = totals[0] * (1.0 / totals[1]);
  } else {
    out[0] = 0.0;
    out[1] = 0.0 * totals[0];
  }
}

}  // namespace wf::kernels::cpu
