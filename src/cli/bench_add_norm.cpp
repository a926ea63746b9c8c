// The fused residual add + norm against the composition, as a pre-norm block runs it: forward, then
// backward with a gradient on both the sum (its second use, the next residual add) and y. The two
// are timed alternately (median_seconds_alternating); medians.
#include "src/cli/bench_add_norm.h"

#include <cstdio>

#include "src/cli/commands.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/engine.h"
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

int run_add_norm_bench(int iters, bool quick) {
  const std::int64_t rows = quick ? 64 : 8192, cols = quick ? 128 : 1024;
  const Shape shape{rows, cols};
  Tensor x = leaf(shape), branch = leaf(shape), w = leaf({cols}), b = leaf({cols});
  const Tensor g_sum = Tensor::randn(shape), g_y = Tensor::randn(shape);
  std::printf("add + norm, forward + backward, f32 [%lld, %lld], %d thread(s), median of %d alternating runs\n",
              static_cast<long long>(rows), static_cast<long long>(cols), num_threads(), iters);
  std::printf("%-10s %14s %12s %8s\n", "norm", "add, norm ms", "fused ms", "ratio");
  for (const bool rms : {false, true}) {
    auto step = [&](bool fused) {
      for (Tensor* t : {&x, &branch, &w, &b}) t->set_grad(Tensor());  // no accumulation into old gradients
      AddNorm out;
      if (fused) {
        out = rms ? add_rms_norm(x, branch, w) : add_layer_norm(x, branch, w, b);
      } else {
        out.sum = add(x, branch);
        out.y = rms ? rms_norm(out.sum, w) : layer_norm(out.sum, w, b);
      }
      autograd::backward({out.sum, out.y}, {g_sum, g_y});
    };
    const MedianPair t = median_seconds_alternating(iters, [&] { step(false); }, [&] { step(true); });
    const double u = t.a, f = t.b;
    std::printf("%-10s %14.2f %12.2f %8.2f\n", rms ? "rms_norm" : "layer_norm", u * 1e3, f * 1e3, u / f);
  }
  return kExitOk;
}

}  // namespace wf::cli
