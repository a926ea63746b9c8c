// The fused chunked head + cross-entropy against the unfused composition, as the decoder's loss
// runs them: f32 h [N, d] and W [V, d] (GPT-2's vocabulary), the loss SUM's backward. Timed
// alternately, run for run, so drift on a shared machine hits both alike; medians. The peak is the
// CPU allocator's most live bytes during a run above what was live before it (the inputs).
#include "src/cli/bench_linear_ce.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "src/cli/commands.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/core/threading.h"
#include "wallfacer/ops/ops.h"

namespace wf::cli {
namespace {

struct Run {
  double seconds = 0;
  std::int64_t peak_bytes = 0;
};

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / double(1 << 20); }

}  // namespace

int run_linear_ce_bench(int iters, bool quick) {
  const std::int64_t N = quick ? 64 : 4096, d = quick ? 32 : 1024, V = quick ? 1001 : 50257;
  Tensor h = Tensor::randn({N, d}), w = scale(Tensor::randn({V, d}), 0.02);  // GPT-2's init scale
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor uniform = Tensor::rand({N});
  Tensor targets = Tensor::empty({N}, DType::i64);
  for (std::int64_t i = 0; i < N; ++i) targets.set(i, std::floor(uniform.at(i) * static_cast<double>(V)));
  // The default chunk; the quick run's sizes would fit one, so it takes chunks of 16 to go through the loop.
  const std::int64_t chunk = quick ? 16 : linear_cross_entropy_chunk_rows(V);

  const auto step = [&](bool fused) {
    h.set_grad(Tensor());  // no accumulation into old gradients, and none held from the last run
    w.set_grad(Tensor());
    // The allocator's cache stays warm, as in training: the peak counts live storages, not cached blocks.
    const std::int64_t before = memory_stats().live_bytes;
    reset_peak_memory();
    const double seconds = seconds_of([&] {
      const Tensor loss =
          fused ? linear_cross_entropy_sum(h, w, targets, -100, chunk) : cross_entropy_sum(linear(h, w), targets);
      autograd::backward({loss});
    });
    return Run{seconds, memory_stats().peak_bytes - before};
  };
  std::printf("linear + cross-entropy SUM, forward + backward, f32 h [%lld, %lld], W [%lld, %lld], chunks of %lld "
              "rows, %d thread(s), median of %d alternating runs\n",
              static_cast<long long>(N), static_cast<long long>(d), static_cast<long long>(V),
              static_cast<long long>(d), static_cast<long long>(chunk), num_threads(), iters);
  step(false);  // warm-up: first-touch pages, the GEMM backend's choice
  step(true);
  std::vector<double> unfused_s, fused_s;
  std::int64_t unfused_peak = 0, fused_peak = 0;
  for (int i = 0; i < iters; ++i) {
    const Run u_run = step(false), f_run = step(true);
    unfused_s.push_back(u_run.seconds);
    fused_s.push_back(f_run.seconds);
    unfused_peak = std::max(unfused_peak, u_run.peak_bytes);
    fused_peak = std::max(fused_peak, f_run.peak_bytes);
  }
  const double u = median(unfused_s), f = median(fused_s);
  std::printf("%-34s %12s %14s\n", "", "median ms", "peak MiB");
  std::printf("%-34s %12.1f %14.1f\n", "linear, cross_entropy_sum", u * 1e3, mib(unfused_peak));
  std::printf("%-34s %12.1f %14.1f\n", "linear_cross_entropy_sum (fused)", f * 1e3, mib(fused_peak));
  std::printf("%-34s %12.2f %14.2f\n", "unfused / fused", u / f,
              static_cast<double>(unfused_peak) / static_cast<double>(std::max<std::int64_t>(fused_peak, 1)));
  return kExitOk;
}

}  // namespace wf::cli
