// `wallfacer tune --profile CFG.yaml [--cluster calibration.yaml] [--top K] [--steps N]
// [--plot out.png] [--write-best OUT.yaml]` under mpirun: the paper's communication topology
// scheduler. Predicts every layout of the mpirun world for the run config on the cluster
// (tune/search.h), runs the top K predicted layouts a few steps each on synthetic tokens
// (measure_layout, what `wallfacer bench layout` runs), prints predicted beside measured step
// time and memory, writes the measured winner as a run config for `wallfacer train`, and with
// --plot draws predicted vs measured bars with gnuplot.
//
// Bad input (config, cluster, a world the cluster cannot hold, no gnuplot for --plot, an
// unwritable output) is found on rank 0 before anything runs and ends every rank with the same
// message, printed once (rank_agreement.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/layout_measure.h"
#include "src/cli/option_checks.h"
#include "src/cli/rank_agreement.h"
#include "src/cli/tune_modes.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/tune/search.h"

namespace wf::cli {
namespace {

// What to run: the cluster and the top predicted candidates, the same on every rank.
struct Plan {
  tune::ClusterSpec cluster;
  std::vector<tune::Candidate> top;
  std::size_t predicted = 0;  // runnable candidates in all
};

Plan make_plan(const ProfileOptions& o, int world) {
  const config::RunConfig user = config::load_config(o.config, o.overrides);
  Plan plan;
  plan.cluster = tune::load_cluster(cluster_path_or_default(o.cluster));
  WF_USER_CHECK(plan.cluster.devices() >= world,
                "wallfacer tune --profile: this job has {} ranks but cluster '{}' describes {} devices ({} nodes x {}); "
                "calibrate this world with `mpirun -np {} wallfacer tune --calibrate` or pass a --cluster that holds it",
                world, plan.cluster.name, plan.cluster.devices(), plan.cluster.nodes, plan.cluster.devices_per_node,
                world);
  const tune::SearchOptions search{.world = world, .sp_only = o.sp_only, .seq_len = o.seq};
  const std::vector<tune::Candidate> all = tune::search_layouts(user, plan.cluster, search);
  for (const tune::Candidate& c : all) {
    if (!c.excluded.empty()) continue;
    ++plan.predicted;
    if (static_cast<int>(plan.top.size()) < o.top) plan.top.push_back(c);
  }
  WF_USER_CHECK(!plan.top.empty(), "wallfacer tune --profile: no layout of {} ranks can run {} ({}; `wallfacer tune "
                "--model {} --world {} --json` lists every reason)",
                world, o.config, all.empty() ? "no candidates" : all.front().excluded, o.config, world);
  return plan;
}

// The executable of gnuplot on PATH, or "".
std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, end - at) + "/gnuplot";
    if (end > at && access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return "";
}

// Everything refusable, on rank 0 (the verdict is shared by check_on_rank0_for_all).
void check_input(const ProfileOptions& o, int world) {
  make_plan(o, world);
  WF_USER_CHECK(o.plot.empty() || !find_gnuplot().empty(),
                "--plot {}: gnuplot is not installed (Debian: apt-get install gnuplot-nox), or leave --plot out",
                o.plot);
  check_writable(o.plot, "--plot");
  check_writable(o.write_best, "--write-best");
}

// ---- the run ---------------------------------------------------------------------------------

struct Row {
  const tune::Candidate* candidate = nullptr;
  int predicted_rank = 0;       // 1-based, among every runnable layout
  std::string skipped;          // why this machine refused it ("" when it ran)
  LayoutMeasurement measured;
  double predicted_ms() const { return candidate->prediction.step_seconds * 1e3; }
  double predicted_mib() const { return candidate->prediction.memory_bytes() / double(1 << 20); }
  // What the rank holds at the step's peak: its parameters, gradients and optimizer state (live
  // across steps) plus the step's own peak above them.
  double measured_mib() const {
    const LayoutMeasurement& m = measured;
    return double(m.parameter_bytes + m.gradient_bytes + m.optimizer_bytes + m.step_peak_bytes) / double(1 << 20);
  }
};

void print_table(const std::vector<Row>& rows, const Plan& plan, const ProfileOptions& o, int world) {
  const config::RunConfig& any = rows.front().candidate->config;
  std::printf("wallfacer tune --profile: %s on %s, world %d, seq %lld, %lld sequences per step; the top %zu of %zu "
              "predicted layouts, 1 warm-up + %d measured steps each\n",
              o.config.c_str(), plan.cluster.name.c_str(), world, static_cast<long long>(any.train.seq_len),
              static_cast<long long>(config::global_batch_sequences(any)), rows.size(), plan.predicted, o.steps);
  std::printf("%4s  %-52s %12s %12s %8s  %14s %14s\n", "rank", "layout", "predicted ms", "measured ms", "error",
              "predicted MiB", "measured MiB");
  for (const Row& r : rows) {
    const std::string layout = tune::layout_label(r.candidate->config);
    if (!r.skipped.empty()) {
      std::printf("%4d  %-52s %12.1f %12s %8s  %14.1f %14s  skipped: %s\n", r.predicted_rank, layout.c_str(),
                  r.predicted_ms(), "-", "-", r.predicted_mib(), "-", r.skipped.c_str());
      continue;
    }
    const double measured_ms = r.measured.step_seconds * 1e3;
    std::printf("%4d  %-52s %12.1f %12.1f %+7.0f%%  %14.1f %14.1f\n", r.predicted_rank, layout.c_str(),
                r.predicted_ms(), measured_ms, (r.predicted_ms() - measured_ms) / measured_ms * 100, r.predicted_mib(),
                r.measured_mib());
  }
  std::printf("memory: predicted = tune's per-rank total; measured = parameters + gradients + optimizer state + the "
              "step's peak above them, max over ranks\n");
}

// gnuplot: predicted and measured step time per layout, side by side.
void plot(const std::vector<const Row*>& ran, const std::string& out) {
  const std::string data = out + ".dat";
  {
    std::ofstream f(data);
    f << "# layout predicted_ms measured_ms\n";
    for (const Row* r : ran) {
      f << '"' << tune::layout_label(r->candidate->config) << "\" " << r->predicted_ms() << ' '
        << r->measured.step_seconds * 1e3 << '\n';
    }
  }
  const std::string script = fmt::format(
      "set terminal pngcairo size {},600 noenhanced\n"
      "set output '{}'\n"
      "set title 'wallfacer tune --profile: predicted vs measured step time'\n"
      "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
      "set ylabel 'step time (ms)'\nset yrange [0:*]\nset xtics rotate by -30 font ',8'\nset key top left\n"
      "set bmargin 10\nset grid ytics\n"
      "plot '{}' using 2:xtic(1) title 'predicted', '' using 3 title 'measured'\n",
      std::max<std::size_t>(800, 160 * ran.size()), out, data);
  const std::string script_path = out + ".gp";
  std::ofstream(script_path) << script;
  const std::string command = fmt::format("'{}' '{}' 2>&1", find_gnuplot(), script_path);
  const int status = std::system(command.c_str());
  std::remove(script_path.c_str());
  std::remove(data.c_str());
  WF_USER_CHECK(status == 0, "--plot {}: gnuplot failed (exit status {}; it needs the pngcairo terminal: Debian's "
                "gnuplot-nox has it)", out, status);
}

int profile(const ProfileOptions& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  comm::Group& world = runtime.world();
  const bool root = world.rank() == 0;
  check_on_rank0_for_all(world, [&] { check_input(o, world.size()); });
  const Plan plan = make_plan(o, world.size());  // rank 0 said it is fine: the same on every rank
  const double machine = job_machine_memory_bytes();

  std::vector<Row> rows;
  for (const tune::Candidate& c : plan.top) {
    Row row;
    row.candidate = &c;
    row.predicted_rank = static_cast<int>(rows.size()) + 1;
    const config::RunConfig run = measurement_config(c.config, o.steps);
    // This machine may refuse what the cluster file allows (memory); the same verdict on every rank.
    const std::vector<std::string> problems =
        config::validation_problems(run, world.size(), config::ValidateScope::this_machine, machine);
    if (problems.empty()) {
      row.measured = measure_layout(run, o.steps);
    } else {
      row.skipped = problems.front();
    }
    if (root && !row.skipped.empty()) std::fprintf(stderr, "%s: skipped: %s\n", tune::layout_label(c.config).c_str(), row.skipped.c_str());
    rows.push_back(std::move(row));
  }
  std::vector<const Row*> ran;
  for (const Row& r : rows) {
    if (r.skipped.empty()) ran.push_back(&r);
  }
  WF_USER_CHECK(!ran.empty(), "wallfacer tune --profile: this machine refused each of the top {} layouts (first: {}); "
                "raise --top", rows.size(), rows.front().skipped);
  const Row& best = **std::min_element(ran.begin(), ran.end(), [](const Row* a, const Row* b) {
    return a->measured.step_seconds < b->measured.step_seconds;
  });
  if (!root) return kExitOk;

  print_table(rows, plan, o, world.size());
  std::printf("measured best: %s, %.1f ms per step (predicted rank %d, %.1f ms)\n",
              tune::layout_label(best.candidate->config).c_str(), best.measured.step_seconds * 1e3,
              best.predicted_rank, best.predicted_ms());
  if (!o.write_best.empty()) {
    std::ofstream out(o.write_best);
    out << "# The fastest of the top " << rows.size() << " predicted layouts `wallfacer tune --profile` measured for "
        << o.config << " on " << world.size() << " ranks (" << plan.cluster.name << "): "
        << tune::layout_label(best.candidate->config) << ", " << fmt::format("{:.1f}", best.measured.step_seconds * 1e3)
        << " ms per step\n"
        << config::to_yaml(best.candidate->config);
    WF_USER_CHECK(out.good(), "--write-best {}: cannot write the file", o.write_best);
  }
  print_best_layout_advice(o.config, best.candidate->config, world.size(), o.write_best);
  if (!o.plot.empty()) {
    plot(ran, o.plot);
    std::printf("wrote %s\n", o.plot.c_str());
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

int run_tune_profile(const ProfileOptions& options) {
  return run_with_shared_errors(comm::Runtime::get().world(), [&] { return profile(options); });
}

}  // namespace wf::cli
