#include "kernels/cpu/replica_spread.h"

#include <algorithm>
#include <cmath>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

void replica_spread(std::int64_t n, const std::vector<std::int64_t>& ends, const double* extremes, const double* own,
                    double* out) {
  WF_CHECK(ends.empty() || ends.back() == n, "replica_spread: the parameters end at {}, but there are {} values",
           ends.empty() ? 0 : ends.back(), n);
  std::int64_t at = 0;
  for (std::size_t p = 0; p < ends.size(); ++p) {
    WF_CHECK(ends[p] >= at, "replica_spread: parameter ends must not decrease, got {} after {}", ends[p], at);
    double spread = 0, scale = 0;
    for (std::int64_t k = at; k < ends[p]; ++k) {
      spread = std::max(spread, extremes[k] + extremes[n + k]);  // max − min over the ranks
      scale = std::max(scale, std::abs(own[k]));
    }
    out[2 * p] = spread;
    out[2 * p + 1] = scale;
    at = ends[p];
  }
}

}  // namespace wf::kernels::cpu
