// `wallfacer tune --calibrate [--out calibration.yaml]` under mpirun: measures what the cost model
// (tune/cost_model.h) needs on THIS machine, with every rank of the job working at the same time —
// ranks that share cores share them here too, so the rates are each rank's share, not a lone
// rank's — and writes a cluster file of one node with a device per rank (tune::to_yaml, read by
// tune::load_cluster). What is measured, each through the framework's own ops and groups:
//   - GEMM FLOP/s in f32 and bf16: wf::linear forward and backward (what nn::Linear runs) on the
//     GEMM shapes of a small transformer block; 3 × 2·M·K·N FLOPs per forward + backward;
//   - the flash attention op (wf::attention), causal, forward and backward, counted as the cost
//     model counts it: 4·d per visible (query, key) pair forward, 2.5 × that backward;
//   - memory bandwidth: wf::add on activation-sized tensors (reads two, writes one);
//   - α–β of the world group per primitive: a ring sendrecv (every rank sends to the next),
//     all-reduce, all-gather, reduce-scatter and all-to-all, each at a small and a large size,
//     fitted in the network model's own formulas (tune/network.h): the P2P's is the link's rate,
//     the collectives' their own (LinkSpec::per_primitive). Each call is timed as training makes
//     it: between GEMMs (about 2 ms of them per rank), as what it adds to a loop of those GEMMs.
//     Back to back, calls find every peer already inside the library; between computations, where
//     ranks share cores (with each other or with other processes) and run in turns of the
//     scheduler, a call also waits until its peers have had their turn, and a blocking collective
//     moves its pieces only while all of its ranks run (its back-to-back time is recorded beside);
//   - overlap: an isendrecv around the ring beside a GEMM loop of about the same length, timed
//     alone and together: (compute + comm − both) / min(compute, comm), the fraction the cost
//     model's beside() hides.
// A time is the slowest rank's (a synchronous step waits for it), per call, the median of 5
// rounds: what a step meets on this machine as it is (other processes included, as `wallfacer
// bench layout` reports the median step), not its best moment.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "src/cli/rank_agreement.h"
#include "src/cli/tune_modes.h"
#include "src/core/atomic_file.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/tune/cluster.h"

namespace wf::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double max_over(comm::Group& world, double value) {
  Tensor t = Tensor::full({1}, value, DType::f64);
  world.all_reduce(t, comm::ReduceOp::max);
  return t.item();
}

// Seconds per call of `call`, run by every rank at once: one warm-up, a pilot call that fixes the
// repetitions (the same on every rank, so all ranks keep working until the slowest is done), then
// kRounds timed rounds after a barrier; each round's time is the slowest rank's. The median round.
double seconds_per_call(comm::Group& world, double target_seconds, const std::function<void()>& call) {
  call();
  const Clock::time_point pilot = Clock::now();
  call();
  const double one = std::max(1e-7, max_over(world, seconds_since(pilot)));
  const int reps = static_cast<int>(std::clamp(std::ceil(target_seconds / one), 1.0, 1e6));
  std::vector<double> rounds;
  for (int round = 0; round < kRounds; ++round) {
    world.barrier();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < reps; ++i) call();
    rounds.push_back(max_over(world, seconds_since(start)) / reps);
  }
  return median(rounds);
}

// ---- compute ---------------------------------------------------------------------------------

// The GEMMs of a transformer block (d_model 256, d_ff 1024, 512 rows per rank: configs/gpt-tiny's
// scale): QKV, the output projection, the MLP's two. M rows, K in, N out.
struct GemmShape {
  std::int64_t m, k, n;
};
constexpr GemmShape kBlockGemms[] = {{512, 256, 768}, {512, 256, 256}, {512, 256, 1024}, {512, 1024, 256}};

// FLOP/s of wf::linear forward + backward (dx and dW) over the block's GEMMs, in `dtype`: f32, or
// bf16 activations with f32 master weights (mixed precision, nn/precision.h), as training runs.
double gemm_flops(comm::Group& world, DType dtype, double target) {
  double flops = 0, seconds = 0;
  for (const GemmShape& g : kBlockGemms) {
    Tensor x = Tensor::randn_at({g.m, g.k}, 1, 0).to(dtype);
    Tensor w = Tensor::randn_at({g.n, g.k}, 2, 0);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    const Tensor dy = Tensor::randn_at({g.m, g.n}, 3, 0).to(dtype);
    seconds += seconds_per_call(world, target / 4, [&] {
      x.set_grad(Tensor());
      w.set_grad(Tensor());
      linear(x, w).backward(dy);
    });
    flops += 6.0 * static_cast<double>(g.m * g.k * g.n);
  }
  return flops / seconds;
}

// Attention rates, FLOPs counted as tune/cost_model.cpp counts them.
struct AttentionRates {
  double forward = 0, backward = 0;  // FLOP/s
};

AttentionRates attention_flops(comm::Group& world, double target) {
  // One rank's share of a causal layer at gpt-tiny's head shape: 1024 queries, 4 heads of 64.
  const std::int64_t B = 1, n = 1024, h = 4, d = 64;
  Tensor q = Tensor::randn_at({B, n, h, d}, 4, 0), k = Tensor::randn_at({B, n, h, d}, 5, 0),
         v = Tensor::randn_at({B, n, h, d}, 6, 0);
  const AttentionOptions causal{.causal = true};
  const double pairs = static_cast<double>(B * h * n) * static_cast<double>(n + 1) / 2.0;
  const double forward_flops = 4.0 * static_cast<double>(d) * pairs;
  const double forward = seconds_per_call(world, target, [&] {
    const autograd::NoGradGuard no_grad;
    attention(q, k, v, causal);
  });
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  const Tensor dout = Tensor::randn_at({B, n, h, d}, 7, 0);
  // Forward with its graph + backward, less the forward alone: the backward's time.
  const double both = seconds_per_call(world, target, [&] {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    attention(q, k, v, causal).out.backward(dout);
  });
  return {forward_flops / forward, 2.5 * forward_flops / std::max(both - forward, 1e-9)};
}

// Bytes per second of wf::add over tensors of 1 Mi f32 elements (4 MiB, an activation of a few
// thousand rows): two read, one written.
double memory_bandwidth(comm::Group& world, double target) {
  const std::int64_t n = 1 << 20;
  const Tensor a = Tensor::randn_at({n}, 8, 0), b = Tensor::randn_at({n}, 9, 0);
  const double seconds = seconds_per_call(world, target, [&] { add(a, b); });
  return 3.0 * static_cast<double>(n) * 4.0 / seconds;
}

// Forward GEMMs of a block's MLP shape (512 x 256 by 256 x 256, wf::linear) repeated for about
// `seconds` on the slowest rank: the compute that communication is timed beside. The same number
// of repetitions on every rank.
class GemmLoop {
 public:
  GemmLoop(comm::Group& world, double seconds)
      : x_(Tensor::randn_at({512, 256}, 10, 0)), w_(Tensor::randn_at({256, 256}, 11, 0)) {
    const double one = max_over(world, median_seconds(5, [this] { once(); }));
    reps_ = static_cast<int>(std::clamp(std::round(seconds / one), 1.0, 1e5));
  }
  void run() const {
    for (int i = 0; i < reps_; ++i) once();
  }

 private:
  void once() const {
    const autograd::NoGradGuard no_grad;
    linear(x_, w_);
  }
  Tensor x_, w_;
  int reps_ = 1;
};

// ---- communication ---------------------------------------------------------------------------

// One primitive of the world group timed at a small and a large size (the size of NCCL-tests:
// the all-reduce buffer, the all-gather output, the reduce-scatter input, the all-to-all buffer,
// the sendrecv message), and its α–β fitted in the network model's own form (tune/network.h):
// t = steps·α + share·S/β, with steps and share per primitive over n ranks:
//   p2p (ring sendrecv: every rank sends to the next)  1 step,        share 1
//   all_reduce                                          2(n − 1),      2(n − 1)/n
//   all_gather, reduce_scatter                          n − 1,         (n − 1)/n
//   all_to_all                                          n − 1 (α per peer), (n − 1)/n
// α from the small size, β from the slope between the sizes, both timed between GEMMs.
constexpr std::int64_t kSmallBytes = 64, kLargeBytes = 1 << 20;
constexpr double kComputeBetweenCalls = 2e-3;  // seconds of GEMMs per rank between two calls

struct PrimitiveTimes {
  tune::Primitive primitive;
  double small = 0, large = 0;              // seconds per call between GEMMs, as a step makes it
  double tight_small = 0, tight_large = 0;  // seconds per call back to back
  tune::LinkRate rate;                      // fitted to small and large
};

// A loop of `calls` blocks of GEMMs (~kComputeBetweenCalls each), with `call` after each block when
// given, on every rank at once: seconds per block, the median of kRounds rounds (seconds_per_call).
// What a call adds to a block is the difference of the two.
double gemm_blocks_seconds(comm::Group& world, const GemmLoop& gemms, int calls, const std::function<void()>& call) {
  return seconds_per_call(world, 0, [&] {
           for (int i = 0; i < calls; ++i) {
             gemms.run();
             if (call) call();
           }
         }) / calls;
}

std::vector<PrimitiveTimes> comm_times(comm::Group& world, double target) {
  const int n = world.size(), me = world.rank();
  const GemmLoop gemms(world, kComputeBetweenCalls);
  const int calls = static_cast<int>(std::clamp(0.8 * target / kComputeBetweenCalls, 3.0, 100.0));
  const double alone = gemm_blocks_seconds(world, gemms, calls, nullptr);
  const auto f32 = [](std::int64_t bytes) { return Tensor::zeros({bytes / 4}, DType::f32); };  // zeros: sums stay finite
  std::vector<PrimitiveTimes> out;
  for (tune::Primitive p : {tune::Primitive::p2p, tune::Primitive::all_reduce, tune::Primitive::all_gather,
                            tune::Primitive::reduce_scatter, tune::Primitive::all_to_all}) {
    // A call of `p` on a buffer of `bytes` (rounded to n f32 pieces): (back to back, between GEMMs).
    // The large calls between fewer GEMM blocks: where cores are contended they take far longer
    // than back to back (a blocking collective moves its pieces only while all of its ranks
    // run), and the loop must stay short.
    const auto time = [&](std::int64_t bytes, int blocks) {
      const std::int64_t piece = std::max<std::int64_t>(4, bytes / n / 4 * 4);
      Tensor whole = f32(piece * n), part = f32(piece), send = f32(bytes), recv = f32(bytes), out = f32(piece * n);
      std::function<void()> call;
      switch (p) {
        case tune::Primitive::p2p: call = [&] { world.sendrecv(send, (me + 1) % n, recv, (me + n - 1) % n); }; break;
        case tune::Primitive::all_reduce: call = [&] { world.all_reduce(send); }; break;
        case tune::Primitive::all_gather: call = [&] { world.all_gather(part, whole); }; break;
        case tune::Primitive::reduce_scatter: call = [&] { world.reduce_scatter(whole, part); }; break;
        case tune::Primitive::all_to_all: call = [&] { world.all_to_all(whole, out); }; break;
      }
      const double tight = seconds_per_call(world, target, call);
      // Between GEMMs: the difference of two timings, never below the call's own time.
      return std::pair{tight, std::max(tight, gemm_blocks_seconds(world, gemms, blocks, call) - alone)};
    };
    PrimitiveTimes t;
    t.primitive = p;
    std::tie(t.tight_small, t.small) = time(kSmallBytes, calls);
    std::tie(t.tight_large, t.large) = time(kLargeBytes, std::max(2, calls / 8));
    const bool p2p = p == tune::Primitive::p2p, all_reduce = p == tune::Primitive::all_reduce;
    const double steps = p2p ? 1.0 : all_reduce ? 2.0 * (n - 1) : n - 1.0;
    const double share = p2p ? 1.0 : all_reduce ? 2.0 * (n - 1) / n : (n - 1.0) / n;
    // Per byte: never faster than back to back (two noisy differences can make the large call
    // look cheaper than the small one).
    const double bytes = static_cast<double>(kLargeBytes - kSmallBytes);
    const double slope = std::max({t.large - t.small, t.tight_large - t.tight_small, 1e-9}) / bytes;
    t.rate.bandwidth_gbs = share / slope * 1e-9;
    t.rate.latency_us = std::max(0.01, t.small / steps * 1e6);
    out.push_back(t);
  }
  return out;
}

struct Overlap {
  double compute_ms = 0, comm_ms = 0, both_ms = 0, fraction = 0;
};

// isendrecv of kLargeBytes around the ring beside a loop of f32 GEMMs sized to the exchange's time.
Overlap overlap(comm::Group& world, double seconds_per_exchange) {
  const int n = world.size(), me = world.rank();
  Tensor send = Tensor::zeros({kLargeBytes / 4}), recv = Tensor::zeros({kLargeBytes / 4});
  const GemmLoop gemms(world, seconds_per_exchange);
  const auto compute = [&] { gemms.run(); };
  const auto timed = [&](const std::function<void()>& body) {
    world.barrier();
    const Clock::time_point start = Clock::now();
    body();
    return max_over(world, seconds_since(start));
  };
  std::vector<double> c, m, b, fraction;
  for (int round = 0; round < 2 * kRounds + 1; ++round) {  // each round's three back to back
    m.push_back(timed([&] { world.isendrecv(send, (me + 1) % n, recv, (me + n - 1) % n, 7).wait(); }));
    c.push_back(timed(compute));
    b.push_back(timed([&] {
      comm::Request request = world.isendrecv(send, (me + 1) % n, recv, (me + n - 1) % n, 7);
      compute();
      request.wait();
    }));
    fraction.push_back((c.back() + m.back() - b.back()) / std::min(c.back(), m.back()));
  }
  return {median(c) * 1e3, median(m) * 1e3, median(b) * 1e3, median(fraction)};
}

// ---- the file --------------------------------------------------------------------------------

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      return name;
    }
  }
  return "cpu";
}

std::string hostname() {
  char name[256] = {0};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
}

double load_average() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

int calibrate(const CalibrateOptions& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  comm::Group& world = runtime.world();
  check_on_rank0_for_all(world, [&] { check_writable(o.out, "--out"); });
  const int n = world.size();
  const bool root = world.rank() == 0;
  const double load_before = load_average();
  if (root) {
    std::printf("wallfacer tune --calibrate: %d rank(s) x %d thread(s) on %s, every rank measuring at once\n", n,
                runtime.threads(), hostname().c_str());
    std::fflush(stdout);
  }
  const double f32 = gemm_flops(world, DType::f32, o.seconds);
  const double bf16 = gemm_flops(world, DType::bf16, o.seconds);
  const AttentionRates attn = attention_flops(world, o.seconds);
  const double memory = memory_bandwidth(world, o.seconds);
  std::vector<PrimitiveTimes> times;
  Overlap ov;
  if (n > 1) {
    times = comm_times(world, o.seconds);
    ov = overlap(world, times.front().tight_large);  // GEMMs as long as the exchange
  }
  const double load_after = load_average();
  if (!root) return kExitOk;

  tune::ClusterSpec c;
  c.name = fmt::format("calibrated-{}-np{}", hostname(), n);
  c.nodes = 1;
  c.devices_per_node = n;
  tune::DeviceSpec& d = c.device;
  d.name = fmt::format("'1/{} of {} ({} thread(s) per rank)'", n, cpu_model(), runtime.threads());
  d.memory_gib = static_cast<double>(machine_memory_bytes()) / n / double(1 << 30);
  // Peak = the fastest measured rate of the dtype, efficiencies relative to it, so that
  // matmul_flops() and attention_flops() give back exactly the measured rates (the CPU computes
  // attention in f32 whatever the storage type: its efficiencies are f32's).
  const double f32_peak = std::max({f32, attn.forward, attn.backward});
  d.matmul_tflops_f32 = f32_peak * 1e-12;
  d.matmul_tflops_bf16 = bf16 * 1e-12;
  d.matmul_efficiency = 1.0;
  if (f32_peak > f32) {  // attention beat the GEMMs: keep the GEMM rate through its efficiency
    d.matmul_tflops_bf16 = bf16 * f32_peak / f32 * 1e-12;
    d.matmul_efficiency = f32 / f32_peak;
  }
  d.attention_efficiency_forward = attn.forward / f32_peak;
  d.attention_efficiency_backward = attn.backward / f32_peak;
  d.memory_gbs = memory * 1e-9;
  if (n > 1) {
    // The link's own rate is the P2P's; each collective has its own (LinkSpec::per_primitive).
    c.intra_node.bandwidth_gbs = times.front().rate.bandwidth_gbs;
    c.intra_node.latency_us = times.front().rate.latency_us;
    for (const PrimitiveTimes& t : times) {
      if (t.primitive != tune::Primitive::p2p) c.intra_node.per_primitive[t.primitive] = t.rate;
    }
  } else {  // one rank sends nothing: a link the model never uses, positive as the format wants
    c.intra_node.bandwidth_gbs = memory / 2 * 1e-9;
    c.intra_node.latency_us = 1.0;
    ov.fraction = 1.0;
  }
  c.overlap = std::clamp(ov.fraction, 1e-3, 1.0);  // the format wants (0, 1]

  std::time_t now = std::time(nullptr);
  std::vector<std::string> comment{
      fmt::format("Written by `mpirun -np {} wallfacer tune --calibrate` on {} at {:%Y-%m-%d %H:%M:%S %z}", n,
                  hostname(), fmt::localtime(now)),
      fmt::format("world {} rank(s) x {} OpenMP thread(s), {} cores; load average {:.2f} before, {:.2f} after", n,
                  runtime.threads(), std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)), load_before, load_after),
      "Every rank measured at the same time; each number is the slowest rank's, median of 5 rounds.",
      fmt::format("GEMM (wf::linear fwd+bwd, 512 rows, d 256 / ff 1024): f32 {:.2f} GFLOP/s, bf16 {:.2f} GFLOP/s per rank",
                  f32 * 1e-9, bf16 * 1e-9),
      fmt::format("attention (wf::attention, causal, n 1024, 4 heads of 64): forward {:.2f} GFLOP/s, backward {:.2f} "
                  "GFLOP/s per rank",
                  attn.forward * 1e-9, attn.backward * 1e-9),
      fmt::format("memory (wf::add, 4 MiB operands): {:.2f} GB/s per rank", memory * 1e-9),
  };
  if (n > 1) {
    for (const PrimitiveTimes& t : times) {
      comment.push_back(fmt::format("{}: {} B {:.1f} us, {} MiB {:.3f} ms between GEMMs ({:.1f} us, {:.3f} ms back to back) -> "
                                    "latency {:.2f} us per step, bandwidth {:.3f} GB/s",
                                    tune::primitive_name(t.primitive), kSmallBytes, t.small * 1e6, kLargeBytes >> 20,
                                    t.large * 1e3, t.tight_small * 1e6, t.tight_large * 1e3, t.rate.latency_us,
                                    t.rate.bandwidth_gbs));
    }
    comment.push_back(fmt::format("overlap: isendrecv {} MiB {:.2f} ms, GEMMs {:.2f} ms, both {:.2f} ms -> {:.3f} "
                                  "(median of rounds){}",
                                  kLargeBytes >> 20, ov.comm_ms, ov.compute_ms, ov.both_ms, ov.fraction,
                                  ov.fraction < 1e-3 ? ", written as 0.001 (the format wants > 0)" : ""));
  } else {
    comment.push_back("one rank: nothing to send; links and overlap are placeholders the model never uses");
  }
  const std::string text = tune::to_yaml(c, comment);
  detail::write_file_atomically(o.out, {{text.data(), text.size()}}, "wallfacer tune --calibrate");
  std::printf("%s", text.c_str());
  std::printf("wrote %s (use it with `wallfacer tune --cluster %s`, the default when it is in the working directory)\n",
              o.out.c_str(), o.out.c_str());
  return kExitOk;
}

}  // namespace

int run_tune_calibrate(const CalibrateOptions& options) {
  return run_with_shared_errors(comm::Runtime::get().world(), [&] { return calibrate(options); });
}

}  // namespace wf::cli
