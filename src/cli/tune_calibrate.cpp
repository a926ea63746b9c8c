// `wallfacer tune --calibrate [--device D] [--transport T] [--out calibration.yaml]` under mpirun: measures
// what the cost model (tune/cost_model.h) needs on THIS machine — on each rank's --device (train.device's
// words and resolution: cuda is the GPU of the rank's local rank), its tensors created there and every
// clock stopped after synchronize(device), device tensors travelling by --transport as
// comm.gpu_transport says — with every rank of the job working at the same time —
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
// bench layout` reports the median step), not its best moment. The shapes are a small transformer's
// on the CPU and the test device, the 1.3B GPT's on a GPU (Shapes below). The file's device section
// names what was measured (a GPU's name and memory as the CUDA runtime reports them), and its
// comment the date and the versions of wallfacer and the CUDA libraries.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/device_options.h"
#include "src/cli/option_checks.h"
#include "src/cli/rank_agreement.h"
#include "src/cli/tune_modes.h"
#include "src/core/atomic_file.h"
#include "src/core/timing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/build_info.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/tune/cluster.h"

namespace wf::cli {
namespace {

constexpr int kRounds = 5;

// The shapes measured. On the CPU and the test device a small transformer's (configs/gpt-tiny's
// scale); on a GPU the 1.3B GPT's (configs/gpt-1.3b.yaml: d_model 2048, 16 heads of 128), since a
// GPU's rate on tiny shapes is its launch overhead, not what a step of a model that fills it meets.
struct Shapes {
  std::int64_t rows, d_model, d_ff;        // a block's GEMMs per rank: QKV, output projection, the MLP's two
  std::int64_t queries, heads, head_dim;   // one rank's share of a causal attention layer
  std::int64_t memory_elements;            // the f32 operands of wf::add (on a GPU, past its cache)
  std::int64_t small_bytes, large_bytes;   // the messages of the α–β fit; the overlap's is the large one
};
constexpr Shapes kHostShapes{512, 256, 1024, 1024, 4, 64, 1 << 20, 64, 1 << 20};
constexpr Shapes kGpuShapes{8192, 2048, 8192, 8192, 16, 128, 1 << 26, 64, 1 << 26};

// Where the measurements run: the ranks' group (device tensors on the --transport), each rank's
// device and the shapes for it.
struct Bench {
  comm::Group& world;
  Device device;
  const Shapes& shapes;
};

double max_over(comm::Group& world, double value) {
  Tensor t = Tensor::full({1}, value, DType::f64);
  world.all_reduce(t, comm::ReduceOp::max);
  return t.item();
}

// Seconds of `body` on every rank at once, from a barrier with every device idle until the
// device has run it (device_seconds): the slowest rank's.
double slowest_rank_seconds(const Bench& b, const std::function<void()>& body) {
  synchronize(b.device);
  b.world.barrier();
  return max_over(b.world, device_seconds(b.device, body));
}

// Seconds per call of `call`, run by every rank at once: one warm-up, a pilot call that fixes the
// repetitions (the same on every rank, so all ranks keep working until the slowest is done), then
// kRounds timed rounds; each round's time is the slowest rank's. The median round.
double seconds_per_call(const Bench& b, double target_seconds, const std::function<void()>& call) {
  call();
  const double one = std::max(1e-7, max_over(b.world, device_seconds(b.device, call)));
  const int reps = static_cast<int>(std::clamp(std::ceil(target_seconds / one), 1.0, 1e6));
  std::vector<double> rounds;
  for (int round = 0; round < kRounds; ++round) {
    rounds.push_back(slowest_rank_seconds(b, [&] {
                       for (int i = 0; i < reps; ++i) call();
                     }) /
                     reps);
  }
  return median(rounds);
}

// ---- compute ---------------------------------------------------------------------------------

// The GEMMs of a transformer block: QKV, the output projection, the MLP's two. M rows, K in, N out.
struct GemmShape {
  std::int64_t m, k, n;
};
std::vector<GemmShape> block_gemms(const Shapes& s) {
  return {{s.rows, s.d_model, 3 * s.d_model}, {s.rows, s.d_model, s.d_model}, {s.rows, s.d_model, s.d_ff},
          {s.rows, s.d_ff, s.d_model}};
}

// Standard normal values made on the host from (seed, 0), as `dtype`, on the bench's device.
Tensor randn_on(const Bench& b, const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  return Tensor::randn_at(shape, seed, 0).to(dtype).to(b.device);
}

// FLOP/s of wf::linear forward + backward (dx and dW) over the block's GEMMs, in `dtype`: f32, or
// bf16 activations with f32 master weights (mixed precision, nn/precision.h), as training runs.
double gemm_flops(const Bench& b, DType dtype, double target) {
  double flops = 0, seconds = 0;
  for (const GemmShape& g : block_gemms(b.shapes)) {
    Tensor x = randn_on(b, {g.m, g.k}, 1, dtype);
    Tensor w = randn_on(b, {g.n, g.k}, 2);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    const Tensor dy = randn_on(b, {g.m, g.n}, 3, dtype);
    seconds += seconds_per_call(b, target / 4, [&] {
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

// In `dtype`: f32 where the kernel computes in f32 whatever the storage (the CPU's, the test
// device's), bf16 on a GPU, as the models train there.
AttentionRates attention_flops(const Bench& b, DType dtype, double target) {
  const std::int64_t B = 1, n = b.shapes.queries, h = b.shapes.heads, d = b.shapes.head_dim;
  Tensor q = randn_on(b, {B, n, h, d}, 4, dtype), k = randn_on(b, {B, n, h, d}, 5, dtype),
         v = randn_on(b, {B, n, h, d}, 6, dtype);
  const AttentionOptions causal{.causal = true};
  const double pairs = static_cast<double>(B * h * n) * static_cast<double>(n + 1) / 2.0;
  const double forward_flops = 4.0 * static_cast<double>(d) * pairs;
  const double forward = seconds_per_call(b, target, [&] {
    const autograd::NoGradGuard no_grad;
    attention(q, k, v, causal);
  });
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  const Tensor dout = randn_on(b, {B, n, h, d}, 7, dtype);
  // Forward with its graph + backward, less the forward alone: the backward's time.
  const double both = seconds_per_call(b, target, [&] {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    attention(q, k, v, causal).out.backward(dout);
  });
  return {forward_flops / forward, 2.5 * forward_flops / std::max(both - forward, 1e-9)};
}

// Bytes per second of wf::add over f32 tensors of Shapes::memory_elements (4 MiB on the host, an
// activation of a few thousand rows; 256 MiB on a GPU, past its cache): two read, one written.
double memory_bandwidth(const Bench& b, double target) {
  const std::int64_t n = b.shapes.memory_elements;
  // Made on the device: the values do not change an addition's time, and 64 Mi normal values
  // drawn on the host would take longer than the measurement.
  const Tensor x = Tensor::full({n}, 1.0, DType::f32, b.device), y = Tensor::full({n}, 2.0, DType::f32, b.device);
  const double seconds = seconds_per_call(b, target, [&] { add(x, y); });
  return 3.0 * static_cast<double>(n) * 4.0 / seconds;
}

// Forward f32 GEMMs of rows x d_model by d_model x d_model (wf::linear) repeated for about
// `seconds` on the slowest rank: the compute that communication is timed beside. The same number
// of repetitions on every rank.
class GemmLoop {
 public:
  GemmLoop(const Bench& b, double seconds)
      : x_(randn_on(b, {b.shapes.rows, b.shapes.d_model}, 10)),
        w_(randn_on(b, {b.shapes.d_model, b.shapes.d_model}, 11)) {
    // Each run ends with the device drained, so the next starts on an idle device: device time.
    const double one = max_over(b.world, median_seconds(5, [&] {
                                  once();
                                  synchronize(b.device);
                                }));
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
double gemm_blocks_seconds(const Bench& b, const GemmLoop& gemms, int calls, const std::function<void()>& call) {
  return seconds_per_call(b, 0, [&] {
           for (int i = 0; i < calls; ++i) {
             gemms.run();
             if (call) call();
           }
         }) / calls;
}

std::vector<PrimitiveTimes> comm_times(const Bench& b, double target) {
  comm::Group& world = b.world;
  const int n = world.size(), me = world.rank();
  const GemmLoop gemms(b, kComputeBetweenCalls);
  const int calls = static_cast<int>(std::clamp(0.8 * target / kComputeBetweenCalls, 3.0, 100.0));
  const double alone = gemm_blocks_seconds(b, gemms, calls, nullptr);
  // zeros: sums stay finite
  const auto f32 = [&](std::int64_t bytes) { return Tensor::zeros({bytes / 4}, DType::f32, b.device); };
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
      const double tight = seconds_per_call(b, target, call);
      // Between GEMMs: the difference of two timings, never below the call's own time.
      return std::pair{tight, std::max(tight, gemm_blocks_seconds(b, gemms, blocks, call) - alone)};
    };
    PrimitiveTimes t;
    t.primitive = p;
    std::tie(t.tight_small, t.small) = time(b.shapes.small_bytes, calls);
    std::tie(t.tight_large, t.large) = time(b.shapes.large_bytes, std::max(2, calls / 8));
    const bool p2p = p == tune::Primitive::p2p, all_reduce = p == tune::Primitive::all_reduce;
    const double steps = p2p ? 1.0 : all_reduce ? 2.0 * (n - 1) : n - 1.0;
    const double share = p2p ? 1.0 : all_reduce ? 2.0 * (n - 1) / n : (n - 1.0) / n;
    // Per byte: never faster than back to back (two noisy differences can make the large call
    // look cheaper than the small one).
    const double bytes = static_cast<double>(b.shapes.large_bytes - b.shapes.small_bytes);
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

// isendrecv of the large message around the ring beside a loop of f32 GEMMs sized to the exchange's time.
Overlap overlap(const Bench& b, double seconds_per_exchange) {
  comm::Group& world = b.world;
  const int n = world.size(), me = world.rank();
  const std::int64_t elements = b.shapes.large_bytes / 4;
  Tensor send = Tensor::zeros({elements}, DType::f32, b.device), recv = Tensor::zeros({elements}, DType::f32, b.device);
  const GemmLoop gemms(b, seconds_per_exchange);
  const auto compute = [&] { gemms.run(); };
  std::vector<double> c, m, both, fraction;
  for (int round = 0; round < 2 * kRounds + 1; ++round) {  // each round's three back to back
    m.push_back(
        slowest_rank_seconds(b, [&] { world.isendrecv(send, (me + 1) % n, recv, (me + n - 1) % n, 7).wait(); }));
    c.push_back(slowest_rank_seconds(b, compute));
    both.push_back(slowest_rank_seconds(b, [&] {
      comm::Request request = world.isendrecv(send, (me + 1) % n, recv, (me + n - 1) % n, 7);
      compute();
      request.wait();
    }));
    fraction.push_back((c.back() + m.back() - both.back()) / std::min(c.back(), m.back()));
  }
  return {median(c) * 1e3, median(m) * 1e3, median(both) * 1e3, median(fraction)};
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

constexpr double kGiB = double(1 << 30);

// What the file's device section names: a GPU as the CUDA runtime reports it, with its memory; else
// one rank's share of this machine's CPU and memory (the test device computes on the CPU too).
tune::DeviceSpec measured_device(Device device, int ranks, int threads) {
  tune::DeviceSpec d;
  if (device.is_cuda()) {
    std::string why;
    const std::optional<CudaDeviceInfo> info = cuda_device_info(device.index, &why);
    WF_CHECK(info.has_value(), "tune --calibrate: cannot read the properties of {}: {}", device.str(), why);
    d.name = fmt::format("'{} (sm_{}, {:.1f} GiB)'", info->name, info->compute_capability,
                         static_cast<double>(info->total_memory) / kGiB);
    d.memory_gib = static_cast<double>(info->total_memory) / kGiB;
    return d;
  }
  const std::string share = fmt::format("1/{} of {} ({} thread(s) per rank)", ranks, cpu_model(), threads);
  d.name = fmt::format("'{}{}'", device.is_test() ? "the test device (the CPU stand-in) on " : "", share);
  d.memory_gib = static_cast<double>(machine_memory_bytes()) / ranks / kGiB;
  return d;
}

// The versions a measurement depends on, for the file's comment.
std::string versions_line(Device device) {
  std::string line = fmt::format("versions: wallfacer {} ({}, {})", WF_VERSION, WF_BUILD_TYPE, WF_CXX_COMPILER);
  if (device.is_cuda()) {
    line += fmt::format("; CUDA toolkit {}, runtime {}, driver {}; NCCL {}, cuDNN {}", WF_CUDA_TOOLKIT_VERSION,
                        cuda_runtime_version(), cuda_driver_version(), WF_BUILT_WITH_NCCL ? "built" : "not built",
                        WF_BUILT_WITH_CUDNN ? "built" : "not built");
  }
  return line;
}

int calibrate(const CalibrateOptions& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  check_on_rank0_for_all(runtime.world(), [&] { check_writable(o.out, "--out"); });
  const Device device = resolve_device_option(o.device);
  const comm::GpuTransport transport = parse_transport_option(o.transport);
  const int n = runtime.world_size();
  const bool root = runtime.rank() == 0;
  // The world as a grid of its own, so that device tensors travel by the transport chosen for it.
  comm::ParallelConfig config;
  config.dp = n;
  comm::CommGrid grid(comm::ProcessGrid(config, n, runtime.rank()));
  const comm::TransportChoice choice =
      device.is_cpu() ? grid.transport() : grid.use_device(device, transport);  // use_device: collective
  const Bench b{grid.group("world"), device, device.is_cuda() ? kGpuShapes : kHostShapes};
  const Shapes& sh = b.shapes;
  const double load_before = load_average();
  if (root) {
    std::printf("wallfacer tune --calibrate: %d rank(s) x %d thread(s) on %s, every rank measuring %s at once\n", n,
                runtime.threads(), hostname().c_str(), device.str().c_str());
    if (!device.is_cpu()) std::printf("transport: %s\n", choice.reason.c_str());
    std::fflush(stdout);
  }
  // Attention in the dtype its kernel computes in: f32 on the CPU and the test device, bf16 on a GPU.
  const DType attention_dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  const double f32 = gemm_flops(b, DType::f32, o.seconds);
  const double bf16 = gemm_flops(b, DType::bf16, o.seconds);
  const AttentionRates attn = attention_flops(b, attention_dtype, o.seconds);
  const double memory = memory_bandwidth(b, o.seconds);
  std::vector<PrimitiveTimes> times;
  Overlap ov;
  if (n > 1) {
    times = comm_times(b, o.seconds);
    ov = overlap(b, times.front().tight_large);  // GEMMs as long as the exchange
  }
  const double load_after = load_average();
  if (!root) return kExitOk;

  tune::ClusterSpec c;
  const std::string device_suffix = device.is_cpu() ? "" : std::string("-") + device_type_name(device.type);
  c.name = fmt::format("calibrated-{}{}-np{}", hostname(), device_suffix, n);
  c.nodes = 1;
  c.devices_per_node = n;
  c.device = measured_device(device, n, runtime.threads());
  tune::DeviceSpec& d = c.device;
  // Peak = the fastest measured rate of attention's dtype, efficiencies relative to it, so that
  // matmul_flops() and attention_flops() give back exactly the measured rates (one efficiency for
  // both dtypes: the other dtype's peak is its GEMM rate over the GEMMs' efficiency).
  const bool attention_f32 = attention_dtype == DType::f32;
  const double gemm = attention_f32 ? f32 : bf16, other_gemm = attention_f32 ? bf16 : f32;
  const double peak = std::max({gemm, attn.forward, attn.backward});
  d.matmul_efficiency = gemm / peak;
  (attention_f32 ? d.matmul_tflops_f32 : d.matmul_tflops_bf16) = peak * 1e-12;
  (attention_f32 ? d.matmul_tflops_bf16 : d.matmul_tflops_f32) = other_gemm / d.matmul_efficiency * 1e-12;
  d.attention_efficiency_forward = attn.forward / peak;
  d.attention_efficiency_backward = attn.backward / peak;
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
  const std::string flags = o.device == "cpu" ? "" : fmt::format(" --device {} --transport {}", o.device, o.transport);
  const std::string mib = fmt::format("{} MiB", sh.large_bytes >> 20);
  std::vector<std::string> comment{
      fmt::format("Written by `mpirun -np {} wallfacer tune --calibrate{}` on {} at {:%Y-%m-%d %H:%M:%S %z}", n, flags,
                  hostname(), fmt::localtime(now)),
      fmt::format("world {} rank(s) x {} OpenMP thread(s), {} cores; load average {:.2f} before, {:.2f} after", n,
                  runtime.threads(), std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)), load_before, load_after),
      fmt::format("measured on {} (rank 0: {}){}", d.name, device.str(),
                  device.is_cpu() ? "" : "; transport: " + choice.reason),
      versions_line(device),
      "Every rank measured at the same time; each number is the slowest rank's, median of 5 rounds.",
      fmt::format("GEMM (wf::linear fwd+bwd, {} rows, d {} / ff {}): f32 {:.2f} GFLOP/s, bf16 {:.2f} GFLOP/s per rank",
                  sh.rows, sh.d_model, sh.d_ff, f32 * 1e-9, bf16 * 1e-9),
      fmt::format("attention (wf::attention, causal, {}, n {}, {} heads of {}): forward {:.2f} GFLOP/s, backward "
                  "{:.2f} GFLOP/s per rank",
                  dtype_name(attention_dtype), sh.queries, sh.heads, sh.head_dim, attn.forward * 1e-9,
                  attn.backward * 1e-9),
      fmt::format("memory (wf::add, {} MiB operands): {:.2f} GB/s per rank", sh.memory_elements * 4 >> 20,
                  memory * 1e-9),
  };
  if (n > 1) {
    for (const PrimitiveTimes& t : times) {
      comment.push_back(fmt::format("{}: {} B {:.1f} us, {} {:.3f} ms between GEMMs ({:.1f} us, {:.3f} ms back to "
                                    "back) -> latency {:.2f} us per step, bandwidth {:.3f} GB/s",
                                    tune::primitive_name(t.primitive), sh.small_bytes, t.small * 1e6, mib,
                                    t.large * 1e3, t.tight_small * 1e6, t.tight_large * 1e3, t.rate.latency_us,
                                    t.rate.bandwidth_gbs));
    }
    comment.push_back(fmt::format("overlap: isendrecv {} {:.2f} ms, GEMMs {:.2f} ms, both {:.2f} ms -> {:.3f} "
                                  "(median of rounds){}",
                                  mib, ov.comm_ms, ov.compute_ms, ov.both_ms, ov.fraction,
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
