// `wallfacer bench comm`: the communication primitives of wf::comm::Group on the world of the
// current mpirun (or a world of one), each beside the raw MPI calls on the same buffers — the
// blocking one and the non-blocking one the MPI backend makes — timed the same way in the
// same run: what the wrapper costs is then visible on a noisy machine.
// With --overlap, also how much of a non-blocking ring exchange hides behind compute, with the
// progress thread off and on (src/comm/progress.h).
//
// Conventions of NCCL-tests: the size of a row is the all_reduce / broadcast buffer, the
// all_gather output, the reduce_scatter input, the all_to_all buffer and the sendrecv message;
// algbw = size / time; busbw = algbw × 2(n−1)/n for all_reduce, × (n−1)/n for all_gather,
// reduce_scatter and all_to_all, × 1 for broadcast and sendrecv. A time is the slowest rank's
// time per call over back-to-back calls; the best of several rounds, in which the three forms
// take turns, is printed (interference from other processes only adds time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "src/core/timing.h"
#include "src/cli/commands.h"
#include "src/cli/option_checks.h"
#include "src/comm/mpi_util.h"
#include "src/comm/progress.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kMiB = 1 << 20;
constexpr double kTargetOverheadPercent = 5.0;
constexpr std::int64_t kTargetFromBytes = kMiB;  // small messages are latency: the target is for bandwidth

struct Options {
  std::int64_t max_bytes = 64 * kMiB;
  int iters = 10;
  int rounds = 5;
  bool json = false;
  bool overlap = false;
  std::int64_t overlap_bytes = 16 * kMiB;
  double compute_ms = 50;
};

// Raw MPI return codes, named like the library's (MPI_ERRORS_RETURN is set on the world).
void check(int rc, const char* call) { comm::check_mpi(rc, call); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The slowest rank's value: a collective is as fast as its last rank.
double slowest(MPI_Comm comm, double local) {
  double result = local;
  check(MPI_Allreduce(&local, &result, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce (timing)");
  return result;
}

// Seconds per call: `iters` calls back to back after a barrier, on the slowest rank.
double seconds_per_call(MPI_Comm comm, int iters, const std::function<void()>& call) {
  check(MPI_Barrier(comm), "MPI_Barrier (timing)");
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) call();
  return slowest(comm, seconds_since(start)) / iters;
}

std::string bytes_text(std::int64_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes / 1024);
  return fmt::format("{} B", bytes);
}

// ---- the primitives -----------------------------------------------------------------------

// MPI takes `void*` even for buffers it only reads; the tensors here are the benchmark's own.
void* data(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

// One primitive at one size: the Group call, the blocking MPI call, and the non-blocking MPI
// call the MPI backend makes (posted, then MPI_Waitall), all on the same buffers (the lambdas
// hold the tensors). The third separates what the wrapper costs from what MPI's non-blocking
// algorithms cost beside its blocking ones.
struct Case {
  std::string primitive;
  std::int64_t bytes = 0;  // the size the bandwidths refer to
  double bus_factor = 1;
  std::function<void()> wrapped;
  std::function<int()> raw;
  std::function<void(std::vector<MPI_Request>&)> raw_start;  // posts the non-blocking form's requests
};

std::vector<Case> make_cases(std::int64_t bytes, comm::Group& world, MPI_Comm c) {
  const int n = world.size(), me = world.rank();
  const std::int64_t elements = std::max<std::int64_t>(1, bytes / 4);
  const std::int64_t piece = std::max<std::int64_t>(1, elements / n);  // each rank's share, f32 elements
  const int piece_bytes = static_cast<int>(piece * 4), piece_count = static_cast<int>(piece);
  const int count = static_cast<int>(elements), byte_count = static_cast<int>(elements * 4);
  const double ring = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  auto f32 = [](std::int64_t numel) { return Tensor::zeros({numel}, DType::f32); };  // zeros: sums stay finite
  auto one = [](std::vector<MPI_Request>& r) -> MPI_Request* { return &r.emplace_back(MPI_REQUEST_NULL); };
  std::vector<Case> cases;

  Tensor t = f32(elements);
  cases.push_back({"all_reduce", elements * 4, 2 * ring, [&world, t]() mutable { world.all_reduce(t); },
                   [=] { return MPI_Allreduce(MPI_IN_PLACE, data(t), count, MPI_FLOAT, MPI_SUM, c); },
                   [=](auto& r) {
                     check(MPI_Iallreduce(MPI_IN_PLACE, data(t), count, MPI_FLOAT, MPI_SUM, c, one(r)),
                           "MPI_Iallreduce");
                   }});
  Tensor piece_in = f32(piece), whole = f32(piece * n);
  cases.push_back({"all_gather", piece * n * 4, ring,
                   [&world, piece_in, whole]() mutable { world.all_gather(piece_in, whole); },
                   [=] {
                     return MPI_Allgather(data(piece_in), piece_bytes, MPI_BYTE, data(whole), piece_bytes,
                                          MPI_BYTE, c);
                   },
                   [=](auto& r) {
                     check(MPI_Iallgather(data(piece_in), piece_bytes, MPI_BYTE, data(whole), piece_bytes,
                                          MPI_BYTE, c, one(r)),
                           "MPI_Iallgather");
                   }});
  Tensor whole_in = f32(piece * n), piece_out = f32(piece);
  cases.push_back({"reduce_scatter", piece * n * 4, ring,
                   [&world, whole_in, piece_out]() mutable { world.reduce_scatter(whole_in, piece_out); },
                   [=] {
                     return MPI_Reduce_scatter_block(data(whole_in), data(piece_out), piece_count, MPI_FLOAT,
                                                     MPI_SUM, c);
                   },
                   [=](auto& r) {
                     check(MPI_Ireduce_scatter_block(data(whole_in), data(piece_out), piece_count, MPI_FLOAT,
                                                     MPI_SUM, c, one(r)),
                           "MPI_Ireduce_scatter_block");
                   }});
  Tensor whole_out = f32(piece * n);
  cases.push_back({"all_to_all", piece * n * 4, ring,
                   [&world, whole_in, whole_out]() mutable { world.all_to_all(whole_in, whole_out); },
                   [=] {
                     return MPI_Alltoall(data(whole_in), piece_bytes, MPI_BYTE, data(whole_out), piece_bytes,
                                         MPI_BYTE, c);
                   },
                   [=](auto& r) {
                     check(MPI_Ialltoall(data(whole_in), piece_bytes, MPI_BYTE, data(whole_out), piece_bytes,
                                         MPI_BYTE, c, one(r)),
                           "MPI_Ialltoall");
                   }});
  cases.push_back({"broadcast", elements * 4, 1.0, [&world, t]() mutable { world.broadcast(t, 0); },
                   [=] { return MPI_Bcast(data(t), byte_count, MPI_BYTE, 0, c); },
                   [=](auto& r) { check(MPI_Ibcast(data(t), byte_count, MPI_BYTE, 0, c, one(r)), "MPI_Ibcast"); }});
  Tensor send = f32(elements), recv = f32(elements);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  cases.push_back({"sendrecv (ring)", elements * 4, 1.0,
                   [&world, send, recv, next, prev]() mutable { world.sendrecv(send, next, recv, prev); },
                   [=] {
                     return MPI_Sendrecv(data(send), byte_count, MPI_BYTE, next, 0, data(recv), byte_count,
                                         MPI_BYTE, prev, 0, c, MPI_STATUS_IGNORE);
                   },
                   [=](auto& r) {
                     check(MPI_Irecv(data(recv), byte_count, MPI_BYTE, prev, 0, c, one(r)), "MPI_Irecv");
                     check(MPI_Isend(data(send), byte_count, MPI_BYTE, next, 0, c, one(r)), "MPI_Isend");
                   }});
  return cases;
}

struct Row {
  std::string primitive;
  std::int64_t bytes = 0;
  double bus_factor = 1;
  double seconds = 1e300, raw_seconds = 1e300, raw_nonblocking_seconds = 1e300;  // per call, best round
  double busbw(double s) const { return static_cast<double>(bytes) / s * 1e-9 * bus_factor; }
  double algbw() const { return static_cast<double>(bytes) / seconds * 1e-9; }
  double overhead_percent() const { return (seconds / raw_seconds - 1.0) * 100.0; }
  double overhead_over_nonblocking_percent() const { return (seconds / raw_nonblocking_seconds - 1.0) * 100.0; }
  bool has_target() const { return bytes >= kTargetFromBytes; }
};

// Calls per round: --iters up to 1 MiB, then fewer (at least one), so a round moves about
// --iters MiB and the 64 MiB rows do not dominate the run.
int calls_per_round(std::int64_t bytes, int iters) {
  return static_cast<int>(std::clamp<std::int64_t>(iters * kMiB / std::max<std::int64_t>(bytes, 1), 1, iters));
}

// The three forms take turns within each round, starting with a different one each round, so
// slow phases of a shared machine fall on all of them.
Row measure(Case& c, MPI_Comm comm, const Options& options) {
  std::vector<MPI_Request> requests;
  const std::function<void()> forms[3] = {
      c.wrapped,
      [&] { check(c.raw(), c.primitive.c_str()); },
      [&] {
        requests.clear();
        c.raw_start(requests);
        check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      },
  };
  Row row{c.primitive, c.bytes, c.bus_factor};
  double* best[3] = {&row.seconds, &row.raw_seconds, &row.raw_nonblocking_seconds};
  for (const auto& form : forms) form();  // warm-up: first touch of the buffers, connection setup
  const int calls = calls_per_round(c.bytes, options.iters);
  for (int round = 0; round < options.rounds; ++round) {
    for (int k = 0; k < 3; ++k) {
      const int form = (round + k) % 3;
      *best[form] = std::min(*best[form], seconds_per_call(comm, calls, forms[form]));
    }
  }
  return row;
}

std::vector<std::int64_t> sizes_up_to(std::int64_t max_bytes) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

// ---- overlap of a ring exchange with compute ----------------------------------------------

// A GEMM loop that knows nothing about MPI, sized to take about `target_ms` on this rank: the
// median product time over a calibration window (robust to a shared machine's pauses).
class ComputeLoop {
 public:
  explicit ComputeLoop(double target_ms)
      : a_(Tensor::randn_at({kN, kN}, 1, 0)), b_(Tensor::randn_at({kN, kN}, 1, kN * kN)), c_(Tensor::zeros({kN, kN})) {
    run_once();
    std::vector<double> call_seconds;
    for (const Clock::time_point start = Clock::now(); seconds_since(start) < 0.05;) {
      const Clock::time_point call = Clock::now();
      run_once();
      call_seconds.push_back(seconds_since(call));
    }
    reps_ = std::max(1, static_cast<int>(target_ms * 1e-3 / median(call_seconds)));
  }
  void run() {
    for (int i = 0; i < reps_; ++i) run_once();
  }

 private:
  static constexpr std::int64_t kN = 192;
  void run_once() {
    kernels::cpu::gemm<float>(false, false, kN, kN, kN, 1.0f, a_.data<float>(), kN, b_.data<float>(), kN, 0.0f,
                              c_.data<float>(), kN);
  }
  Tensor a_, b_, c_;
  int reps_ = 1;
};

// Who computes while the exchange is in flight: every rank (the balanced case, where the
// exchange can only hide behind compute if a core is spare for copying), or only the even
// ranks while the odd ones wait (an imbalanced ring step: without progress the exchange
// starts only when the computing rank reaches wait()).
enum class Computing { all_ranks, even_ranks };
const char* computing_name(Computing c) { return c == Computing::all_ranks ? "all ranks" : "even ranks"; }

struct OverlapRow {
  comm::ProgressMode mode;
  Computing computing;
  std::int64_t bytes = 0;
  // Medians over rounds of the slowest rank's seconds.
  double compute = 0, comm = 0, total = 0;
  // The share of the exchange hidden behind compute, (compute + comm − total) / comm: 1 when
  // it costs nothing, 0 when it adds its whole time (below 0 when sharing cores slows the
  // compute down). The median of the rounds' own values: each round measures its three
  // times back to back, so a shared machine's slow phases cancel within a round.
  double efficiency = 0;
  // The same with the compute time of the overlapped run itself, 1 − (total − its compute) /
  // comm: how much of the exchange was still left when the compute ended. Immune to the
  // compute time changing between runs (on a loaded machine by more than the exchange takes),
  // blind to the compute slowing down because it shares its core.
  double hidden = 0;
};

// For each layout and progress mode, per round (all four take turns within a round, so they
// see the same phases of a shared machine): the exchange alone, the compute alone, then both
// — the exchange posted, the compute run, the exchange waited for.
std::vector<OverlapRow> measure_overlap(comm::Group& world, MPI_Comm raw_comm, const Options& options) {
  const int n = world.size(), me = world.rank();
  const std::int64_t elements = std::max<std::int64_t>(1, options.overlap_bytes / 4);
  Tensor send = Tensor::zeros({elements}, DType::f32), recv = Tensor::zeros({elements}, DType::f32);
  ComputeLoop compute(options.compute_ms);
  auto exchange = [&] { return world.isendrecv(send, (me + 1) % n, recv, (me + n - 1) % n, 1); };
  auto timed = [&](const std::function<void()>& body) {
    check(MPI_Barrier(raw_comm), "MPI_Barrier (timing)");
    const Clock::time_point start = Clock::now();
    body();
    return slowest(raw_comm, seconds_since(start));
  };
  const comm::ProgressMode saved = comm::progress_mode();
  std::vector<OverlapRow> rows;
  for (Computing computing : {Computing::all_ranks, Computing::even_ranks}) {
    for (comm::ProgressMode mode : {comm::ProgressMode::off, comm::ProgressMode::thread}) {
      rows.push_back({mode, computing, elements * 4});
    }
  }
  std::vector<std::vector<double>> compute_s(rows.size()), comm_s(rows.size()), total_s(rows.size()),
      efficiency(rows.size()), hidden(rows.size());
  exchange().wait();  // warm-up
  for (int round = 0; round < options.rounds; ++round) {
    for (std::size_t k = 0; k < rows.size(); ++k) {
      comm::set_progress_mode(rows[k].mode);
      const bool computes = rows[k].computing == Computing::all_ranks || me % 2 == 0;
      auto work = [&] {
        if (computes) compute.run();
      };
      comm_s[k].push_back(timed([&] { exchange().wait(); }));
      compute_s[k].push_back(timed(work));
      double compute_in_total = 0;
      total_s[k].push_back(timed([&] {
        comm::Request request = exchange();
        const Clock::time_point start = Clock::now();
        work();
        compute_in_total = seconds_since(start);
        request.wait();
      }));
      compute_in_total = slowest(raw_comm, compute_in_total);
      hidden[k].push_back(1.0 - (total_s[k].back() - compute_in_total) / comm_s[k].back());
      efficiency[k].push_back((compute_s[k].back() + comm_s[k].back() - total_s[k].back()) / comm_s[k].back());
    }
  }
  comm::set_progress_mode(saved);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    rows[k].compute = median(compute_s[k]);
    rows[k].comm = median(comm_s[k]);
    rows[k].total = median(total_s[k]);
    rows[k].efficiency = median(efficiency[k]);
    rows[k].hidden = median(hidden[k]);
  }
  return rows;
}

// ---- output -------------------------------------------------------------------------------

double load_average() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

void print_table(const std::vector<Row>& rows, const std::vector<OverlapRow>& overlap, const Options& options,
                 int ranks) {
  std::printf("wallfacer bench comm: %d rank(s) (world group, MPI backend), f32, best of %d rounds x %d calls (fewer > 1 MiB), "
              "argument checks %s, %d thread(s)/rank, load average %.2f\n",
              ranks, options.rounds, options.iters, comm::argument_checks_enabled() ? "on" : "off", num_threads(),
              load_average());
  std::printf("%-16s %8s %11s %10s %10s | %11s %10s %9s | %11s %9s\n", "primitive", "size", "time_us", "algbw GB/s",
              "busbw GB/s", "MPI time_us", "MPI busbw", "overhead", "MPI_I* us", "vs MPI_I*");
  const Row* worst = nullptr;
  for (const Row& r : rows) {
    std::printf("%-16s %8s %11.1f %10.3f %10.3f | %11.1f %10.3f %+8.1f%% | %11.1f %+8.1f%%\n", r.primitive.c_str(),
                bytes_text(r.bytes).c_str(), r.seconds * 1e6, r.algbw(), r.busbw(r.seconds), r.raw_seconds * 1e6,
                r.busbw(r.raw_seconds), r.overhead_percent(), r.raw_nonblocking_seconds * 1e6,
                r.overhead_over_nonblocking_percent());
    if (r.has_target() && (worst == nullptr || r.overhead_percent() > worst->overhead_percent())) worst = &r;
  }
  if (worst == nullptr) {
    std::printf("target: wrapper overhead < %.0f%% at >= %s: no size measured (see --max-bytes)\n",
                kTargetOverheadPercent, bytes_text(kTargetFromBytes).c_str());
  } else {
    std::printf("target: wrapper overhead < %.0f%% at >= %s: %s (worst %+.1f%%: %s %s)\n", kTargetOverheadPercent,
                bytes_text(kTargetFromBytes).c_str(), worst->overhead_percent() < kTargetOverheadPercent ? "met" : "MISSED",
                worst->overhead_percent(), worst->primitive.c_str(), bytes_text(worst->bytes).c_str());
  }
  if (overlap.empty()) return;
  std::printf("\noverlap: isendrecv of %s around the ring while a GEMM loop computes (~%.0f ms), median of %d rounds\n",
              bytes_text(overlap.front().bytes).c_str(), options.compute_ms, options.rounds);
  std::printf("%-11s %-9s %11s %9s %16s %9s %9s %8s\n", "computing", "progress", "compute_ms", "comm_ms",
              "compute+comm_ms", "total_ms", "overlap", "hidden");
  for (const OverlapRow& o : overlap) {
    std::printf("%-11s %-9s %11.2f %9.2f %16.2f %9.2f %8.0f%% %7.0f%%\n", computing_name(o.computing),
                comm::progress_mode_name(o.mode), o.compute * 1e3, o.comm * 1e3, (o.compute + o.comm) * 1e3,
                o.total * 1e3, o.efficiency * 100, o.hidden * 100);
  }
  std::printf("overlap = (compute + comm - total) / comm; hidden = 1 - (total - compute within that run) / comm; "
              "medians over rounds. 100%%: the exchange is hidden entirely, 0%%: not at all\n");
}

void print_json(const std::vector<Row>& rows, const std::vector<OverlapRow>& overlap, int ranks) {
  bool met = true, measured = false;  // measured: a row the target applies to
  for (const Row& r : rows) {
    Json j;
    j["section"] = "primitive";
    j["primitive"] = r.primitive;
    j["bytes"] = r.bytes;
    j["ranks"] = ranks;
    j["time_us"] = r.seconds * 1e6;
    j["algbw_gbps"] = r.algbw();
    j["busbw_gbps"] = r.busbw(r.seconds);
    j["raw_time_us"] = r.raw_seconds * 1e6;
    j["raw_busbw_gbps"] = r.busbw(r.raw_seconds);
    j["overhead_percent"] = r.overhead_percent();
    j["raw_nonblocking_time_us"] = r.raw_nonblocking_seconds * 1e6;
    j["overhead_over_nonblocking_percent"] = r.overhead_over_nonblocking_percent();
    if (r.has_target()) {
      measured = true;
      met = met && r.overhead_percent() < kTargetOverheadPercent;
    }
    std::printf("%s\n", j.dump().c_str());
  }
  for (const OverlapRow& o : overlap) {
    Json j;
    j["section"] = "overlap";
    j["progress"] = comm::progress_mode_name(o.mode);
    j["computing"] = computing_name(o.computing);
    j["bytes"] = o.bytes;
    j["ranks"] = ranks;
    j["compute_ms"] = o.compute * 1e3;
    j["comm_ms"] = o.comm * 1e3;
    j["total_ms"] = o.total * 1e3;
    j["overlap_efficiency"] = o.efficiency;
    j["hidden_fraction"] = o.hidden;
    std::printf("%s\n", j.dump().c_str());
  }
  Json summary;
  summary["section"] = "target";
  summary["max_overhead_percent"] = kTargetOverheadPercent;
  summary["from_bytes"] = kTargetFromBytes;
  summary["met"] = measured ? Json(met) : Json(nullptr);  // null: no size reached the target's range
  summary["load_average"] = load_average();
  std::printf("%s\n", summary.dump().c_str());
}

int run(const Options& options) {
  comm::Runtime& runtime = comm::Runtime::get();
  comm::Group& world = runtime.world();
  // The raw calls get their own communicator, as the world group has.
  MPI_Comm raw_comm = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm), "MPI_Comm_dup");

  std::vector<Row> rows;
  for (std::int64_t bytes : sizes_up_to(options.max_bytes)) {
    for (Case& c : make_cases(bytes, world, raw_comm)) rows.push_back(measure(c, raw_comm, options));
  }
  const std::vector<OverlapRow> overlap = options.overlap ? measure_overlap(world, raw_comm, options)
                                                          : std::vector<OverlapRow>{};
  check(MPI_Comm_free(&raw_comm), "MPI_Comm_free");

  if (runtime.rank() != 0) return kExitOk;
  if (options.json) print_json(rows, overlap, world.size());
  else print_table(rows, overlap, options, world.size());
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "comm",
      "Group primitives (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, sendrecv) from 1 KiB up, "
      "beside raw MPI on the same buffers; run under mpirun for more than one rank");
  command->add_option("--max-bytes", options->max_bytes, "largest size (sizes go 1 KiB, 4 KiB, ... up to it)")
      ->check(in_range(std::int64_t{1024}, std::int64_t{1} << 30));
  command->add_option("--iters", options->iters, "calls per timed round up to 1 MiB (fewer above: about iters MiB a round)")
      ->check(positive());
  command->add_option("--rounds", options->rounds, "timed rounds (the best is printed; overlap: the median)")
      ->check(positive());
  command->add_flag("--json", options->json, "one JSON object per line instead of the table");
  command->add_flag("--overlap", options->overlap,
                    "also measure how much of a non-blocking ring exchange hides behind compute, progress thread "
                    "off and on");
  command->add_option("--overlap-bytes", options->overlap_bytes, "message size of the overlap measurement")
      ->check(in_range(std::int64_t{4}, std::int64_t{1} << 30));
  command->add_option("--compute-ms", options->compute_ms, "compute time of the overlap measurement")
      ->check(in_range(1.0, 10000.0));
  set_action(*command, [options] {
    // run_main: an error on one rank ends every rank (no rank waits forever in a collective).
    return comm::run_main(0, nullptr, [&] { return run(*options); });
  });
}

}  // namespace wf::cli
