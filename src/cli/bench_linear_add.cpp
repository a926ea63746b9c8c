// The residual add inside the projection (linear_add) against linear then add, as a transformer
// block's feed-forward output runs it: forward, then backward into x, the weight, the bias and the
// residual. The two are timed alternately (median_seconds_alternating); medians. On the CPU
// linear_add_forward is the composition itself (backend.h), so the ratio there measures only the
// op's own overhead; the gain is a backend's epilogue.
#include "src/cli/bench_linear_add.h"

#include <cstdio>

#include "src/cli/commands.h"
#include "src/core/timing.h"
#include "wallfacer/core/threading.h"
#include "wallfacer/ops/ops.h"

namespace wf::cli {
namespace {

Tensor leaf(const Shape& shape) {
  Tensor t = Tensor::randn(shape);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

int run_linear_add_bench(int iters, bool quick) {
  const std::int64_t rows = quick ? 64 : 8192, in = quick ? 128 : 4096, out = quick ? 32 : 1024;
  Tensor x = leaf({rows, in}), w = leaf({out, in}), b = leaf({out}), residual = leaf({rows, out});
  const Tensor g = Tensor::randn({rows, out});
  std::printf("residual + linear, forward + backward, f32 [%lld, %lld] -> [%lld], %d thread(s), median of %d "
              "alternating runs\n",
              static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out), num_threads(),
              iters);
  std::printf("%-10s %16s %12s %8s\n", "bias", "linear, add ms", "fused ms", "ratio");
  for (const bool with_bias : {true, false}) {
    const Tensor bias = with_bias ? b : Tensor();
    auto step = [&](bool fused) {
      for (Tensor* t : {&x, &w, &b, &residual}) t->set_grad(Tensor());  // no accumulation into old gradients
      const Tensor y = fused ? linear_add(x, w, bias, residual) : add(residual, linear(x, w, bias));
      y.backward(g);
    };
    const MedianPair t = median_seconds_alternating(iters, [&] { step(false); }, [&] { step(true); });
    const double u = t.a, f = t.b;
    std::printf("%-10s %16.2f %12.2f %8.2f\n", with_bias ? "bias" : "no bias", u * 1e3, f * 1e3, u / f);
  }
  return kExitOk;
}

}  // namespace wf::cli
