#include "src/cli/bench_sgemm.h"

#include <cblas.h>

#include "src/cli/bench_stats.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::cli {

double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters) {
  init_blas_threads();
  Tensor a = Tensor::randn({m, k}), b = Tensor::randn({k, n}), c = Tensor::zeros({m, n});
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const double s = median_seconds(iters, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0f, a.data<float>(), ki, b.data<float>(), ni,
                0.0f, c.data<float>(), ni);
  });
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / s * 1e-9;
}

}  // namespace wf::cli
