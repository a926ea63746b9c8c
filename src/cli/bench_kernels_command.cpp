// `wallfacer bench kernels`: GEMM and attention throughput on this CPU, each printed beside
// OpenBLAS sgemm measured in the same run, so the ratio means something on a noisy machine.
//
// FLOP counts: GEMM 2·M·N·K. Attention forward 4·n²·d·h for a full mask, half for causal;
// backward 2.5× forward (the convention of the FlashAttention papers).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "src/cli/bench_add_norm.h"
#include "src/cli/bench_linear_add.h"
#include "src/cli/bench_linear_ce.h"
#include "src/cli/bench_qkv_rope.h"
#include "wallfacer/train/peak_flops.h"
#include "src/core/timing.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::cli {
namespace {

struct Options {
  int threads = 1;
  int iters = 3;
  bool quick = false;  // small sizes: a smoke test of the command, not a measurement
  bool json = false;
  bool add_norm = false;  // only the fused residual add + norm against the composition
  bool linear_add = false;  // only the residual add inside the projection against linear then add
  bool linear_ce = false;  // only the fused chunked head + cross-entropy against the composition
  bool qkv_rope = false;  // only the fused QKV split + RoPE against the composition
};

struct Row {
  std::string kernel, size;
  double ms = 0, gflops = 0, reference_gflops = 0, target = 0;  // target: minimum ratio
};

Row bench_gemm(std::int64_t n, kernels::cpu::GemmBackend backend, double reference, int iters) {
  Tensor a = Tensor::randn({n, n}), b = Tensor::randn({n, n}), c = Tensor::zeros({n, n});
  const double s = median_seconds(iters, [&] {
    kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                              c.data<float>(), n, backend);
  });
  return {fmt::format("gemm f32 ({})", kernels::cpu::gemm_backend_name(backend)), fmt::format("{0}x{0}x{0}", n),
          s * 1e3, 2.0 * n * n * n / s * 1e-9, reference, 0.9};
}

// bf16 operands, f32 result: the product bf16 training runs (native where gemm_bf16_native()).
Row bench_gemm_bf16(std::int64_t n, double reference, int iters) {
  Tensor a = Tensor::randn({n, n}).to(DType::bf16), b = Tensor::randn({n, n}).to(DType::bf16), c = Tensor::zeros({n, n});
  const double s = median_seconds(iters, [&] {
    kernels::cpu::gemm_bf16(false, false, n, n, n, 1.0f, a.data<bf16>(), n, b.data<bf16>(), n, 0.0f, c.data<float>(), n);
  });
  return {fmt::format("gemm bf16 ({})", kernels::cpu::gemm_bf16_native() ? "onednn" : "f32 widened"),
          fmt::format("{0}x{0}x{0}", n), s * 1e3, 2.0 * n * n * n / s * 1e-9, reference, 0};
}

// Attention fwd and bwd with f32 or bf16 operands (bf16: the bf16 kernel, every dot product in
// bf16 with f32 accumulation; run where the CPU multiplies bf16 natively, as the op layer does).
std::vector<Row> bench_attention(std::int64_t n, bool causal, bool bf16_operands, double reference, int iters) {
  kernels::cpu::AttentionShape shape;
  shape.batch = 1;
  shape.q_len = shape.kv_len = n;
  shape.heads = shape.kv_heads = 8;
  shape.head_dim = 64;
  shape.causal = causal;
  const Shape qshape{1, n, 8, 64}, lshape{1, 8, n};
  Tensor q = Tensor::randn(qshape), k = Tensor::randn(qshape), v = Tensor::randn(qshape), d_o = Tensor::randn(qshape);
  Tensor o = Tensor::empty(qshape), lse = Tensor::empty(lshape);
  Tensor dq = Tensor::empty(qshape), dk = Tensor::empty(qshape), dv = Tensor::empty(qshape);
  const Tensor q16 = q.to(DType::bf16), k16 = k.to(DType::bf16), v16 = v.to(DType::bf16), d_o16 = d_o.to(DType::bf16);
  auto forward = [&] {
    if (bf16_operands) {
      kernels::cpu::attention_forward_bf16(shape, q16.data<bf16>(), k16.data<bf16>(), v16.data<bf16>(), o.data<float>(),
                                           lse.data<float>());
    } else {
      kernels::cpu::attention_forward<float>(shape, q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(),
                                             lse.data<float>());
    }
  };
  auto backward = [&] {
    if (bf16_operands) {
      kernels::cpu::attention_backward_bf16(shape, q16.data<bf16>(), k16.data<bf16>(), v16.data<bf16>(),
                                            o.data<float>(), lse.data<float>(), d_o16.data<bf16>(), dq.data<float>(),
                                            dk.data<float>(), dv.data<float>());
    } else {
      kernels::cpu::attention_backward<float>(shape, q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(),
                                              lse.data<float>(), d_o.data<float>(), dq.data<float>(), dk.data<float>(),
                                              dv.data<float>());
    }
  };
  const double fwd_s = median_seconds(iters, forward);
  const double bwd_s = median_seconds(iters, backward);
  const double fwd_flops = 4.0 * n * n * 64 * 8 * (causal ? 0.5 : 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  const std::string size = fmt::format("B=1 h=8 d=64 n={}", n);
  const std::string tag = fmt::format("{}, {}", causal ? "causal" : "full", bf16_operands ? "bf16" : "f32");
  // The target is the f32 kernel's; bf16 is printed beside it.
  const double target = bf16_operands ? 0 : 0.4;
  return {
      {"attention fwd (" + tag + ")", size, fwd_s * 1e3, fwd_flops / fwd_s * 1e-9, reference, 0},
      {"attention bwd (" + tag + ")", size, bwd_s * 1e3, bwd_flops / bwd_s * 1e-9, reference, 0},
      {"attention fwd+bwd (" + tag + ")", size, (fwd_s + bwd_s) * 1e3, (fwd_flops + bwd_flops) / (fwd_s + bwd_s) * 1e-9,
       reference, target},
  };
}

int run(const Options& options) {
  set_num_threads(options.threads);
  if (options.add_norm) return run_add_norm_bench(options.iters, options.quick);
  if (options.linear_add) return run_linear_add_bench(options.iters, options.quick);
  if (options.linear_ce) return run_linear_ce_bench(options.iters, options.quick);
  if (options.qkv_rope) return run_qkv_rope_bench(options.iters, options.quick);
  const std::vector<std::int64_t> gemm_sizes = options.quick ? std::vector<std::int64_t>{128} : std::vector<std::int64_t>{1024, 2048};
  const std::int64_t attn_n = options.quick ? 128 : 2048;

  // One reference rate per GEMM size (OpenBLAS); attention is measured against the default
  // backend at the first size.
  std::vector<Row> rows;
  double attention_reference = 0;
  for (auto n : gemm_sizes) {
    const double ref = train::sgemm_gflops(n, n, n, options.iters, "openblas");
    rows.push_back({"openblas sgemm (reference)", fmt::format("{0}x{0}x{0}", n), 2.0 * n * n * n / ref * 1e-6, ref, ref, 0});
    for (auto backend : {kernels::cpu::GemmBackend::cblas, kernels::cpu::GemmBackend::onednn,
                         kernels::cpu::GemmBackend::eigen}) {
      if (!kernels::cpu::gemm_backend_available(backend)) continue;
      Row row = bench_gemm(n, backend, ref, options.iters);
      if (backend != kernels::cpu::default_gemm_backend()) row.target = 0;  // only the default has a target
      // Attention's yardstick: the default backend's rate at the first size, which its tiles run on.
      if (backend == kernels::cpu::default_gemm_backend() && attention_reference == 0) attention_reference = row.gflops;
      rows.push_back(row);
    }
    rows.push_back(bench_gemm_bf16(n, ref, options.iters));
  }
  for (bool causal : {false, true}) {
    for (bool bf16_operands : {false, true}) {
      if (bf16_operands && !kernels::cpu::gemm_bf16_native()) continue;  // the op layer widens to f32 there
      for (auto& row : bench_attention(attn_n, causal, bf16_operands, attention_reference, options.iters)) {
        rows.push_back(row);
      }
    }
  }

  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  if (options.json) {
    for (const auto& r : rows) {
      nlohmann::ordered_json j;
      j["kernel"] = r.kernel;
      j["size"] = r.size;
      j["time_ms"] = r.ms;
      j["gflops"] = r.gflops;
      j["reference_sgemm_gflops"] = r.reference_gflops;
      j["ratio"] = r.gflops / r.reference_gflops;
      if (r.target > 0) j["target_ratio"] = r.target;
      j["threads"] = options.threads;
      j["openblas_coretype"] = coretype ? coretype : "";
      std::printf("%s\n", j.dump().c_str());
    }
    return kExitOk;
  }
  std::printf("wallfacer bench kernels: %d thread(s), %s, OPENBLAS_CORETYPE=%s\n", options.threads, blas_info(),
              coretype ? coretype : "(unset)");
  std::printf("default gemm: %s\n", train::default_gemm_description().c_str());
  std::printf("bf16 products: %s\n", kernels::cpu::gemm_bf16_path());
  std::printf("%-32s %-20s %10s %10s %12s %7s %s\n", "kernel", "size", "time_ms", "GFLOP/s", "sgemm GFLOP/s", "ratio",
              "target");
  for (const auto& r : rows) {
    const double ratio = r.gflops / r.reference_gflops;
    const std::string target = r.target > 0 ? fmt::format(">= {:.2f} {}", r.target, ratio >= r.target ? "met" : "MISSED") : "";
    std::printf("%-32s %-20s %10.2f %10.1f %12.1f %7.2f %s\n", r.kernel.c_str(), r.size.c_str(), r.ms, r.gflops,
                r.reference_gflops, ratio, target.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_bench_kernels_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "kernels", "GEMM (1024, 2048 f32) and attention fwd+bwd (B=1 h=8 d=64 n=2048) GFLOP/s beside OpenBLAS sgemm");
  command->add_option("--threads", options->threads, "CPU threads (the targets are for 1)")->check(positive());
  command->add_option("--iters", options->iters, "timed runs per kernel (the median is printed)")
      ->check(positive());
  command->add_flag("--quick", options->quick, "tiny sizes: checks the command runs, measures nothing useful");
  command->add_flag("--json", options->json, "one JSON object per line instead of the table");
  CLI::Option* add_norm = command->add_flag("--add-norm", options->add_norm,
                    "instead: the residual add fused into LayerNorm/RMSNorm against add then the norm "
                    "(f32 [8192, 1024], forward + backward, alternating runs)");
  CLI::Option* linear_add = command->add_flag("--linear-add", options->linear_add,
                    "instead: the residual add inside the projection (linear_add) against linear then add "
                    "(f32 [8192, 4096] -> [1024], forward + backward, alternating runs)");
  CLI::Option* linear_ce = command->add_flag("--linear-ce", options->linear_ce,
                    "instead: the head and its cross-entropy fused in chunks of rows against linear then "
                    "cross_entropy_sum (f32 h [4096, 1024], V 50257, forward + backward, alternating runs; "
                    "median ms and peak MiB)");
  CLI::Option* qkv_rope = command->add_flag("--qkv-rope", options->qkv_rope,
                    "instead: the QKV split with RoPE fused (split_qkv_rope) against narrow + reshape + rope "
                    "(f32, T=8192, 32 heads, 8 kv heads, head_dim 128, forward + backward, alternating runs)");
  // The fused-against-composed benches: one per run.
  const std::vector<CLI::Option*> fused_benches{add_norm, linear_add, linear_ce, qkv_rope};
  for (CLI::Option* a : fused_benches)
    for (CLI::Option* b : fused_benches)
      if (a != b) a->excludes(b);
  set_action(*command, [options] { return run(*options); });
}

}  // namespace wf::cli
