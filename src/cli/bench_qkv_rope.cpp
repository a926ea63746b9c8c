// The fused QKV split + RoPE against the composition, as SelfAttention::project runs it on a
// LLaMA-like layer (32 query heads, 8 kv heads, head_dim 128, 8192 tokens, f32): forward, then
// backward with a gradient on each of q, k and v. Timed alternately (median_seconds_alternating).
#include "src/cli/bench_qkv_rope.h"

#include <cstdio>

#include "src/cli/commands.h"
#include "src/core/timing.h"
#include "src/ops/qkv_rope_composed.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/threading.h"
#include "wallfacer/ops/ops.h"

namespace wf::cli {

int run_qkv_rope_bench(int iters, bool quick) {
  const std::int64_t tokens = quick ? 64 : 8192, heads = quick ? 4 : 32, kv_heads = quick ? 2 : 8,
                     head_dim = quick ? 16 : 128, G = heads / kv_heads;
  const double theta = 500000.0;
  Tensor projected = Tensor::randn({1, tokens, kv_heads * (G + 2) * head_dim});
  projected.set_requires_grad(true);
  const Tensor positions = Tensor::arange(0.0, static_cast<double>(tokens), 1.0, DType::i64);
  const Tensor gq = Tensor::randn({1, tokens, heads, head_dim}), gk = Tensor::randn({1, tokens, kv_heads, head_dim}),
               gv = Tensor::randn({1, tokens, kv_heads, head_dim});
  auto step = [&](bool fused) {
    projected.set_grad(Tensor());  // no accumulation into the last run's gradient
    const QkvHeads h = fused ? split_qkv_rope(projected, kv_heads, G, head_dim, positions, theta)
                             : ops::composed_split_qkv_rope(projected, kv_heads, G, head_dim, positions, theta);
    autograd::backward({h.q, h.k, h.v}, {gq, gk, gv});
  };
  std::printf("QKV split + RoPE, forward + backward, f32, B=1 T=%lld heads=%lld kv_heads=%lld head_dim=%lld, "
              "%d thread(s), median of %d alternating runs\n",
              static_cast<long long>(tokens), static_cast<long long>(heads), static_cast<long long>(kv_heads),
              static_cast<long long>(head_dim), num_threads(), iters);
  const MedianPair t = median_seconds_alternating(iters, [&] { step(false); }, [&] { step(true); });
  std::printf("%-16s %16s %12s %8s\n", "op", "composed ms", "fused ms", "ratio");
  std::printf("%-16s %16.2f %12.2f %8.2f\n", "split_qkv_rope", t.a * 1e3, t.b * 1e3, t.a / t.b);
  return kExitOk;
}

}  // namespace wf::cli
