// `wallfacer bench device`: the two numbers a device is judged by, measured through the ops layer
// (wf::matmul, wf::attention and the autograd engine) on any device — the same code a training
// step runs, so the backend's dispatch, allocation and precision policy are inside the number.
// scripts/device-check.sh prints them beside PyTorch in the same run (docs/gpu.md).
//
//   - gemm: bf16 A [M, K] @ B [K, N] (f32 accumulation; the output dtype is the backend's), square
//     (--size) or each --shape MxNxK in turn (a model's GEMMs: scripts/device-check.sh's speed phase);
//   - attention: bf16 q [B, N, H, d], k and v [B, N, H_kv, d] (GQA when H_kv < H), causal or full,
//     forward then backward from a random d_out; every combination of the --tokens, --head-dim,
//     --kv-heads and --mask lists in turn (a sweep in one process: one start, one line each).
//
// FLOP counts (the FlashAttention papers' convention, also what scripts/bench_torch_gpu.py uses):
// GEMM 2·M·N·K; attention forward 4·B·H·N²·d for a full mask and half that, 2·B·H·N²·d, for a
// causal one (N²/2 visible pairs, not the exact N(N+1)/2), H the query heads (GQA shares K/V, not
// work); backward 2.5× the forward. Each result line is flushed at once, so a sweep cut short by a
// time limit keeps the lines it finished.
//
// Timing: each call is bracketed by synchronize(device), so a time is the host clock around
// work that has finished (wf::Event has no elapsed time); the sync costs ~10 µs, under 1% of the
// GPU calls at the default sizes. Warm-up calls first, then the median of --iters calls. Inputs
// are fresh normal draws (never zeros: METHOD.md), and results are checked before they are
// reported: sampled GEMM entries and attention rows against f64 on the host, gradients finite.
// A check that fails makes the command exit 1: a wrong kernel's speed means nothing.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/ops/linalg.h"
#if WF_HAVE_CUDA
#include "kernels/cuda/attention_choice.h"
#endif

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kSeed = 20261205;
constexpr int kSamples = 16;  // GEMM entries and attention rows checked against f64
// Errors in units of the checked quantity's natural size (below): bf16 output rounding alone
// gives ~4e-3; a wrong kernel (a transposed operand, a missing block) gives ~1.
constexpr double kMaxCheckError = 5e-2;

struct Options {
  std::string device = "cuda";
  std::string only;  // "", "gemm" or "attention"
  std::int64_t size = 8192;  // M = N = K when no --shape is given
  std::vector<std::string> shapes;  // "MxNxK"
  std::int64_t batch = 1, heads = 16;
  std::vector<std::int64_t> tokens{8192}, head_dims{128}, kv_heads{0};  // kv 0: as many as heads
  std::vector<std::string> masks{"causal"};
  int warmup = 2, iters = 10;
  bool json = false;
};

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};

// One attention of the sweep.
struct AttentionCase {
  std::int64_t batch = 0, tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
};

// "MxNxK" -> the shape, or a message that names the option and the fix.
GemmShape parse_gemm_shape(const std::string& text) {
  GemmShape g;
  char x1 = 0, x2 = 0;
  long long m = 0, n = 0, k = 0;
  int used = 0;
  const bool ok = std::sscanf(text.c_str(), "%lld%c%lld%c%lld%n", &m, &x1, &n, &x2, &k, &used) == 5 && x1 == 'x' &&
                  x2 == 'x' && used == static_cast<int>(text.size()) && m > 0 && n > 0 && k > 0;
  WF_USER_CHECK(ok, "bench device --shape {}: expected MxNxK with three positive integers, e.g. --shape 8192x6144x2048",
                text);
  g.m = m, g.n = n, g.k = k;
  return g;
}

std::vector<GemmShape> gemm_shapes(const Options& o) {
  if (o.shapes.empty()) return {{o.size, o.size, o.size}};
  std::vector<GemmShape> shapes;
  for (const std::string& text : o.shapes) shapes.push_back(parse_gemm_shape(text));
  return shapes;
}

std::vector<AttentionCase> attention_cases(const Options& o) {
  std::vector<AttentionCase> cases;
  for (const std::string& mask : o.masks) {
    for (const std::int64_t d : o.head_dims) {
      for (const std::int64_t kv : o.kv_heads) {
        const std::int64_t h_kv = kv == 0 ? o.heads : kv;
        WF_USER_CHECK(o.heads % h_kv == 0,
                      "bench device --kv-heads {}: the key/value heads must divide --heads {} (GQA groups of "
                      "query heads); use a divisor of {}, or 0 for as many as --heads",
                      kv, o.heads, o.heads);
        for (const std::int64_t n : o.tokens) cases.push_back({o.batch, n, o.heads, h_kv, d, mask == "causal"});
      }
    }
  }
  return cases;
}

// One result line, out at once (a sweep cut short by a timeout keeps what it finished).
void emit(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

struct Timed {
  double median_s = 0;
  std::vector<double> all_s;
};

// Seconds of `fn`, the device idle before and drained after.
double timed_call(Device device, const std::function<void()>& fn) {
  synchronize(device);
  const Clock::time_point start = Clock::now();
  fn();
  synchronize(device);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Normal draws in bf16 on the host (kept for the f64 check) and their copy on the device.
struct Operand {
  Tensor host, dev;
};
Operand random_bf16(const Shape& shape, std::uint64_t stream, Device device) {
  Tensor host = Tensor::randn_at(shape, kSeed + stream, 0, DType::f32).to(DType::bf16);
  return {host, host.to(device)};
}

std::vector<double> host_values(const Tensor& t) { return t.to(Device::cpu()).to_vector<double>(); }

// Sample k of n (spread over the range, the ends included).
std::int64_t sample(std::int64_t k, std::int64_t n) { return n <= 1 ? 0 : k * (n - 1) / (kSamples - 1); }

// ---- gemm ----------------------------------------------------------------------------------

struct GemmResult {
  double ms = 0, tflops = 0, check = 0;
};

// |c − Σ a·b| over sqrt(Σ (a·b)²), the size of a sum of K random products.
double gemm_check(const Tensor& a, const Tensor& b, const Tensor& c, const GemmShape& g) {
  const std::vector<double> av = host_values(a), bv = host_values(b), cv = host_values(c);
  double worst = 0;
  for (std::int64_t s = 0; s < kSamples; ++s) {
    const std::int64_t i = sample(s, g.m), j = sample((s * 7 + 3) % kSamples, g.n);
    double sum = 0, squares = 0;
    for (std::int64_t k = 0; k < g.k; ++k) {
      const double p = av[static_cast<std::size_t>(i * g.k + k)] * bv[static_cast<std::size_t>(k * g.n + j)];
      sum += p;
      squares += p * p;
    }
    const double got = cv[static_cast<std::size_t>(i * g.n + j)];
    const double error = std::isfinite(got) ? std::abs(got - sum) / std::sqrt(std::max(squares, 1e-300)) : INFINITY;
    worst = std::max(worst, error);
  }
  return worst;
}

GemmResult bench_gemm(const Options& o, const GemmShape& g, Device device) {
  const Operand a = random_bf16({g.m, g.k}, 1, device), b = random_bf16({g.k, g.n}, 2, device);
  Tensor c;
  for (int i = 0; i < o.warmup; ++i) timed_call(device, [&] { c = matmul(a.dev, b.dev); });
  std::vector<double> times;
  for (int i = 0; i < o.iters; ++i) times.push_back(timed_call(device, [&] { c = matmul(a.dev, b.dev); }));
  const double s = median(times);
  return {s * 1e3, 2.0 * double(g.m) * double(g.n) * double(g.k) / s * 1e-12, gemm_check(a.host, b.host, c, g)};
}

// ---- attention -----------------------------------------------------------------------------

struct AttentionBench {
  double fwd_ms = 0, bwd_ms = 0, tflops = 0, fwd_tflops = 0, bwd_tflops = 0, check = 0;
  std::int64_t nonfinite_grads = 0;
};

// Sampled rows of the output against f64 softmax(q·kᵀ·scale)·v on the host (keys up to the
// query's own position when causal; query head h reads key/value head h / (H / H_kv)):
// ‖o − ref‖ / ‖ref‖ per row, the worst row.
double attention_check(const AttentionCase& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out) {
  const std::int64_t N = o.tokens, H = o.heads, d = o.head_dim, group = o.heads / o.kv_heads;
  const std::vector<double> qv = host_values(q), kv = host_values(k), vv = host_values(v), ov = host_values(out);
  const double scale = 1.0 / std::sqrt(double(d));
  const auto at = [&](std::int64_t heads, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t c) {
    return static_cast<std::size_t>(((b * N + t) * heads + h) * d + c);
  };
  double worst = 0;
  std::vector<double> scores(static_cast<std::size_t>(N)), ref(static_cast<std::size_t>(d));
  for (std::int64_t s = 0; s < kSamples; ++s) {
    const std::int64_t b = sample(s, o.batch), h = sample((s * 5 + 1) % kSamples, H), i = sample(s, N);
    const std::int64_t g = h / group, last = o.causal ? i : N - 1;
    double top = -INFINITY;
    for (std::int64_t j = 0; j <= last; ++j) {
      double dot = 0;
      for (std::int64_t c = 0; c < d; ++c) dot += qv[at(H, b, i, h, c)] * kv[at(o.kv_heads, b, j, g, c)];
      scores[static_cast<std::size_t>(j)] = dot * scale;
      top = std::max(top, dot * scale);
    }
    double total = 0;
    std::fill(ref.begin(), ref.end(), 0.0);
    for (std::int64_t j = 0; j <= last; ++j) {
      const double p = std::exp(scores[static_cast<std::size_t>(j)] - top);
      total += p;
      for (std::int64_t c = 0; c < d; ++c) ref[static_cast<std::size_t>(c)] += p * vv[at(o.kv_heads, b, j, g, c)];
    }
    double diff = 0, norm = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double r = ref[static_cast<std::size_t>(c)] / total, got = ov[at(H, b, i, h, c)];
      diff += std::isfinite(got) ? (got - r) * (got - r) : INFINITY;
      norm += r * r;
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-300)));
  }
  return worst;
}

std::int64_t count_nonfinite(const std::vector<Tensor>& tensors) {
  std::int64_t n = 0;
  for (const Tensor& t : tensors) {
    for (double x : host_values(t)) n += std::isfinite(x) ? 0 : 1;
  }
  return n;
}

AttentionBench bench_attention(const Options& o, const AttentionCase& a, Device device) {
  const Shape shape{a.batch, a.tokens, a.heads, a.head_dim}, kv_shape{a.batch, a.tokens, a.kv_heads, a.head_dim};
  Operand q = random_bf16(shape, 3, device), k = random_bf16(kv_shape, 4, device), v = random_bf16(kv_shape, 5, device);
  const Operand d_out = random_bf16(shape, 6, device);
  for (Tensor* t : {&q.dev, &k.dev, &v.dev}) t->set_requires_grad();
  AttentionOptions options;
  options.causal = a.causal;

  AttentionResult result;
  std::vector<double> fwd, bwd;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    for (Tensor* t : {&q.dev, &k.dev, &v.dev}) t->set_grad(Tensor());
    const double f = timed_call(device, [&] { result = attention(q.dev, k.dev, v.dev, options); });
    const double b = timed_call(device, [&] { autograd::backward({result.out}, {d_out.dev}); });
    if (i >= o.warmup) {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  AttentionBench r;
  r.fwd_ms = median(fwd) * 1e3;
  r.bwd_ms = median(bwd) * 1e3;
  const double fwd_flops = (a.causal ? 2.0 : 4.0) * double(a.batch * a.heads) * double(a.tokens) * double(a.tokens) *
                           double(a.head_dim);
  r.fwd_tflops = fwd_flops / (r.fwd_ms * 1e-3) * 1e-12;
  r.bwd_tflops = 2.5 * fwd_flops / (r.bwd_ms * 1e-3) * 1e-12;
  r.tflops = 3.5 * fwd_flops / ((r.fwd_ms + r.bwd_ms) * 1e-3) * 1e-12;
  r.check = attention_check(a, q.host, k.host, v.host, result.out);
  r.nonfinite_grads = count_nonfinite({q.dev.grad(), k.dev.grad(), v.dev.grad()});
  return r;
}

// ---- the command -----------------------------------------------------------------------------

std::string device_description(Device device) {
  if (!device.is_cuda()) return device.str();
  std::string error;
  const std::vector<std::string> devices = cuda_devices(&error);
  const auto index = static_cast<std::size_t>(device.index);
  return index < devices.size() ? devices[index] : fmt::format("{} (not visible: {})", device.str(), error);
}

// Which implementation ran a case's bf16 forward and backward on a GPU (attention_choice.h: the own
// kernel, cuDNN or the sm_90 forward, chosen per shape at its first use); "-" elsewhere.
struct Implementations {
  std::string forward = "-", backward = "-";
};
Implementations attention_implementations([[maybe_unused]] const AttentionCase& c,
                                          [[maybe_unused]] Device device) {
  Implementations used;
#if WF_HAVE_CUDA
  if (device.is_cuda()) {
    const kernels::AttentionShape s{.batch = c.batch, .q_len = c.tokens, .kv_len = c.tokens, .heads = c.heads,
                                    .kv_heads = c.kv_heads, .head_dim = c.head_dim, .causal = c.causal};
    used.forward = kernels::cuda::attention_choice_for(device.index, s, false);
    used.backward = kernels::cuda::attention_choice_for(device.index, s, true);
  }
#endif
  return used;
}

int run(const Options& o) {
  const Device device = Device::parse(o.device);
  const std::vector<GemmShape> shapes = gemm_shapes(o);          // bad input refused before anything runs
  const std::vector<AttentionCase> cases = attention_cases(o);
  const std::string timing = fmt::format("median of {} after {} warm-up, synchronized", o.iters, o.warmup);
  if (!o.json) emit("device: " + device_description(device));
  bool ok = true;
  if (o.only.empty() || o.only == "gemm") {
    for (const GemmShape& shape : shapes) {
      const GemmResult g = bench_gemm(o, shape, device);
      ok = ok && g.check <= kMaxCheckError;
      if (o.json) {
        emit(Json{{"bench", "gemm"}, {"device", device.str()}, {"dtype", "bf16"}, {"M", shape.m}, {"N", shape.n},
                  {"K", shape.k}, {"ms", g.ms}, {"tflops", g.tflops}, {"flops", "2*M*N*K"}, {"check_error", g.check}}
                 .dump());
      } else {
        emit(fmt::format("gemm bf16 {}x{}x{}: {:.3f} ms, {:.4g} TFLOP/s (2·M·N·K; {}); check {:.1e}", shape.m, shape.n,
                         shape.k, g.ms, g.tflops, timing, g.check));
      }
    }
  }
  if (o.only.empty() || o.only == "attention") {
    for (const AttentionCase& c : cases) {
      const AttentionBench a = bench_attention(o, c, device);
      ok = ok && a.check <= kMaxCheckError && a.nonfinite_grads == 0;
      const char* mask = c.causal ? "causal" : "full";
      const Implementations by = attention_implementations(c, device);
      if (o.json) {
        emit(Json{{"bench", "attention"}, {"device", device.str()}, {"dtype", "bf16"}, {"causal", c.causal},
                  {"mask", mask}, {"batch", c.batch}, {"tokens", c.tokens}, {"heads", c.heads},
                  {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}, {"fwd_ms", a.fwd_ms}, {"bwd_ms", a.bwd_ms},
                  {"ms", a.fwd_ms + a.bwd_ms}, {"tflops", a.tflops}, {"fwd_tflops", a.fwd_tflops},
                  {"bwd_tflops", a.bwd_tflops},
                  {"flops", c.causal ? "fwd 2*B*H*N^2*d (causal), bwd 2.5*fwd" : "fwd 4*B*H*N^2*d, bwd 2.5*fwd"},
                  {"check_error", a.check}, {"nonfinite_grads", a.nonfinite_grads}, {"forward_by", by.forward},
                  {"backward_by", by.backward}}
                 .dump());
      } else {
        emit(fmt::format("attention fwd+bwd bf16 {} B={} N={} H={}{} d={}: {:.3f} ms (fwd {:.3f}, bwd {:.3f}), "
                         "{:.4g} TFLOP/s (fwd {:.4g}, bwd {:.4g}; fwd {}·B·H·N²·d, bwd 2.5× fwd; {}); check {:.1e}, "
                         "{} non-finite gradients; forward by {}, backward by {}",
                         mask, c.batch, c.tokens, c.heads,
                         c.kv_heads == c.heads ? std::string() : fmt::format(" (kv {})", c.kv_heads), c.head_dim,
                         a.fwd_ms + a.bwd_ms, a.fwd_ms, a.bwd_ms, a.tflops, a.fwd_tflops, a.bwd_tflops,
                         c.causal ? 2 : 4, timing, a.check, a.nonfinite_grads, by.forward, by.backward));
      }
    }
  }
  if (!ok) {
    print_error(fmt::format("bench device: a result on {} is wrong (check error above {}, or non-finite gradients): "
                            "the times above measure a broken kernel",
                            device.str(), kMaxCheckError));
    return kExitRuntimeError;
  }
  return kExitOk;
}

}  // namespace

void add_bench_device_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "device",
      "bf16 GEMMs and attention fwd+bwd (sweeps over lengths, head dims, masks, GQA) through the ops layer on one "
      "device: time and TFLOP/s, results checked against f64 (scripts/device-check.sh prints them beside PyTorch)");
  command->add_option("--device", options->device, "cuda, cuda:N or cpu (cpu: small sizes, to test the command)");
  command->add_option("--only", options->only, "gemm or attention (default: both)")
      ->check(CLI::IsMember({"gemm", "attention"}));
  command->add_option("--size", options->size, "GEMM M = N = K (when no --shape is given)")->check(positive());
  command->add_option("--shape", options->shapes, "GEMM MxNxK instead of the square --size (repeatable)");
  command->add_option("--batch", options->batch, "attention batch B")->check(positive());
  command->add_option("--tokens", options->tokens, "attention sequence lengths N (a list: 4096,8192 sweeps)")
      ->delimiter(',')
      ->check(positive());
  command->add_option("--heads", options->heads, "attention query heads H")->check(positive());
  command->add_option("--kv-heads", options->kv_heads,
                      "key/value heads, each dividing --heads (GQA; 0: as many as --heads; a list sweeps)")
      ->delimiter(',')
      ->check(non_negative());
  command->add_option("--head-dim", options->head_dims, "attention head dimensions d (a list sweeps)")
      ->delimiter(',')
      ->check(positive());
  command->add_option("--mask", options->masks, "causal or full (a list sweeps; default causal)")
      ->delimiter(',')
      ->check(CLI::IsMember({"causal", "full"}));
  command->add_option("--warmup", options->warmup, "untimed calls first")->check(non_negative());
  command->add_option("--iters", options->iters, "timed calls (the median is printed)")->check(positive());
  command->add_flag("--json", options->json, "one JSON object per line per benchmark");
  set_action(*command, [options] { return run(*options); });
}

}  // namespace wf::cli
