// `wallfacer tune --model CFG.yaml [--cluster FILE.yaml] [--world N] [--seq N] [--sp-only] [--top K]
// [--json] [--set k=v]... [--write-best OUT.yaml]`: ranks every layout of a world for the model
// on a described cluster without running it (tune/search.h, tune/cost_model.h), prints the top
// layouts with their predicted step time, memory and dominant cost, why the best wins, a legend of
// its name and the `mpirun ... train CFG --set ...` line that trains it.
// Two more modes run on this machine under mpirun, each in its own file (tune_modes.h):
//   --calibrate [--device D] [--transport T] [--out calibration.yaml]
//                                          measures it (each rank's device) and writes its cluster file
//   --profile CFG.yaml [--top K] [--steps N] [--plot out.png] [--write-best OUT.yaml]
//                                          runs the top predicted layouts and compares
// --cluster defaults to calibration.yaml in the working directory when that file exists.
// docs/tuning.md explains the model and its validation.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/device_options.h"
#include "src/cli/option_checks.h"
#include "src/cli/tune_modes.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/tune/search.h"

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;

struct TuneOptions {
  std::string model;
  std::string cluster;
  int world = 0;
  std::int64_t seq = 0;
  bool sp_only = false;
  int top = 10;
  bool json = false;
  std::vector<std::string> overrides;
  std::string write_best;
  // The modes that measure (tune_modes.h).
  bool calibrate = false;
  CalibrateOptions calibration;
  std::string profile;
  int steps = 2;
  std::string plot;
};

double gib(double bytes) { return bytes / double(1 << 30); }

Json terms_json(const std::vector<tune::Term>& terms) {
  Json j = Json::object();
  for (const tune::Term& t : terms) j[t.name] = t.value;
  return j;
}

Json candidate_json(const tune::Candidate& c) {
  const config::ParallelSection& p = c.config.parallel;
  Json j;
  j["layout"] = tune::layout_label(c.config);
  j["dp"] = p.dp;
  j["tp"] = p.tp;
  j["pp"] = p.pp;
  j["sp"] = p.sp;
  j["strategy"] = p.sp > 1 ? parallel::sp_strategy_name(p.sp_strategy) : "none";
  const bool teams = p.sp_strategy == parallel::SpStrategy::wallfacer ||
                     p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer;
  j["C"] = teams ? p.C : 1;
  j["U"] = p.sp_strategy == parallel::SpStrategy::ulysses ? p.sp
           : p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? p.U : 1;
  j["ulysses_inner"] = p.ulysses_inner;
  j["placement"] = comm::placement_name(p.placement);
  j["zero"] = p.zero;
  j["checkpoint_attention"] = tune::checkpoints_attention(c.config);
  j["pp_schedule"] = parallel::to_string(p.pp_schedule);
  j["pp_virtual"] = p.pp_virtual;
  j["micro_batch_size"] = c.config.train.micro_batch_size;
  if (!c.excluded.empty()) {
    j["excluded"] = c.excluded;
    return j;
  }
  const tune::Prediction& r = c.prediction;
  j["step_s"] = r.step_seconds;
  j["tokens_per_s"] = r.tokens_per_second;
  j["memory_bytes"] = r.memory_bytes();
  j["memory"] = terms_json(r.memory);
  j["time"] = terms_json(r.time);
  j["dominant"] = r.dominant().name;
  Json traffic = Json::object();
  for (const auto& [group, bytes] : r.traffic) traffic[group] = bytes;
  j["traffic_bytes"] = traffic;
  return j;
}

// "sp communication 1.20 s (61%), attention 0.50 s (25%), ..." largest first.
std::string breakdown(const tune::Prediction& p) {
  std::vector<tune::Term> terms = p.time;
  std::sort(terms.begin(), terms.end(), [](const tune::Term& a, const tune::Term& b) { return a.value > b.value; });
  std::string out;
  for (const tune::Term& t : terms) {
    out += fmt::format("{}{} {:.3g} s ({:.0f}%)", out.empty() ? "" : ", ", t.name, t.value, 100 * t.value / p.step_seconds);
  }
  return out;
}

void print_table(const std::vector<tune::Candidate>& all, const TuneOptions& o, const tune::ClusterSpec& cluster,
                 int world) {
  int runnable = 0;
  for (const tune::Candidate& c : all) runnable += c.excluded.empty() ? 1 : 0;
  const config::RunConfig& any = all.front().config;
  std::printf("wallfacer tune: %s on %s (%d nodes x %d %s), world %d, seq %lld, %lld sequences per step, %s%s\n",
              any.model.name.c_str(), cluster.name.c_str(), cluster.nodes, cluster.devices_per_node,
              cluster.device.name.c_str(), world, static_cast<long long>(any.train.seq_len),
              static_cast<long long>(config::global_batch_sequences(any)), dtype_name(any.train.dtype),
              o.sp_only ? ", sp only" : "");
  std::printf("%zu layouts: %d predicted, %zu excluded (--json lists every one with its reason)\n\n", all.size(),
              runnable, all.size() - static_cast<std::size_t>(runnable));
  if (runnable == 0) {
    std::printf("no layout can run; the first reasons:\n");
    for (std::size_t i = 0; i < all.size() && i < 5; ++i) {
      std::printf("  %s: %s\n", tune::layout_label(all[i].config).c_str(), all[i].excluded.c_str());
    }
    return;
  }
  std::printf("%4s  %-74s %10s %12s %10s  %s\n", "rank", "layout", "step s", "tokens/s", "GiB/rank", "dominant");
  for (int i = 0; i < runnable && i < o.top; ++i) {
    const tune::Candidate& c = all[static_cast<std::size_t>(i)];
    const tune::Prediction& p = c.prediction;
    std::printf("%4d  %-74s %10.4g %12.4g %10.2f  %s (%.0f%%)\n", i + 1, tune::layout_label(c.config).c_str(),
                p.step_seconds, p.tokens_per_second, gib(p.memory_bytes()), p.dominant().name.c_str(),
                100 * p.dominant().value / p.step_seconds);
  }
  // Why the best wins: its breakdown, beside the best layout of every other strategy.
  const tune::Candidate& best = all.front();
  std::printf("\nbest: %s, %.4g s per step, %.4g tokens/s, %.2f GiB per rank\n  time: %s\n",
              tune::layout_label(best.config).c_str(), best.prediction.step_seconds, best.prediction.tokens_per_second,
              gib(best.prediction.memory_bytes()), breakdown(best.prediction).c_str());
  std::vector<std::string> seen{tune::strategy_label(best.config)};
  for (int i = 1; i < runnable; ++i) {
    const tune::Candidate& c = all[static_cast<std::size_t>(i)];
    const std::string strategy = tune::strategy_label(c.config);
    if (std::find(seen.begin(), seen.end(), strategy) != seen.end()) continue;
    seen.push_back(strategy);
    std::printf("  best %s: %s, %.4g s (%.2fx the best's step): %s\n", strategy.c_str(),
                tune::layout_label(c.config).c_str(), c.prediction.step_seconds,
                c.prediction.step_seconds / best.prediction.step_seconds, breakdown(c.prediction).c_str());
  }
}

int run_tune(const TuneOptions& o) {
  const config::RunConfig user = config::load_config(o.model, o.overrides);
  const tune::ClusterSpec cluster = tune::load_cluster(cluster_path_or_default(o.cluster));
  const tune::SearchOptions search{.world = o.world, .sp_only = o.sp_only, .seq_len = o.seq};
  const std::vector<tune::Candidate> all = tune::search_layouts(user, cluster, search);
  const int world = o.world > 0 ? o.world : cluster.devices();
  if (o.json) {
    for (const tune::Candidate& c : all) std::printf("%s\n", candidate_json(c).dump().c_str());
  } else {
    print_table(all, o, cluster, world);
  }
  if (!o.write_best.empty()) {
    WF_USER_CHECK(!all.empty() && all.front().excluded.empty(),
                  "--write-best {}: no layout can run, so there is nothing to write", o.write_best);
    std::ofstream out(o.write_best);
    out << "# The best layout `wallfacer tune` predicted for " << o.model << " on " << cluster.name << " (world "
        << world << "): " << tune::layout_label(all.front().config) << "\n"
        << config::to_yaml(all.front().config);
    WF_USER_CHECK(out.good(), "--write-best {}: cannot write the file", o.write_best);
  }
  if (!o.json && !all.empty() && all.front().excluded.empty()) {
    print_best_layout_advice(o.model, all.front().config, world, o.write_best);
  }
  return kExitOk;
}

// Which mode the options ask for; a usage error (exit 2) for a mix that means nothing.
int dispatch(TuneOptions& o, const CLI::App& command) {
  const int modes = (o.calibrate ? 1 : 0) + (o.profile.empty() ? 0 : 1) + (o.model.empty() ? 0 : 1);
  if (modes != 1) {
    print_error("wallfacer tune: give exactly one of --model CFG.yaml (predict), --profile CFG.yaml (predict, then "
                "run the top layouts under mpirun) or --calibrate (measure this machine under mpirun)");
    return kExitUsageError;
  }
  if (o.calibrate) {
    return comm::run_main(0, nullptr, [&] { return run_tune_calibrate(o.calibration); });
  }
  if (!o.profile.empty()) {
    const ProfileOptions p{.config = o.profile, .overrides = o.overrides, .cluster = o.cluster, .seq = o.seq,
                           .sp_only = o.sp_only, .top = command.count("--top") > 0 ? o.top : 3, .steps = o.steps,
                           .plot = o.plot, .write_best = o.write_best};
    return comm::run_main(0, nullptr, [&] { return run_tune_profile(p); });
  }
  return run_tune(o);
}

}  // namespace

std::string cluster_path_or_default(const std::string& given) {
  if (!given.empty()) return given;
  constexpr const char* kDefault = "calibration.yaml";
  WF_USER_CHECK(std::ifstream(kDefault).good(),
                "wallfacer tune: no --cluster given and no {} in the working directory; pass --cluster FILE.yaml "
                "(clusters/ holds the paper's clusters, e.g. clusters/h100-8x8.yaml) or measure this machine first "
                "with `mpirun -np N wallfacer tune --calibrate`",
                kDefault);
  return kDefault;
}

void add_tune_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "tune", "Rank every layout of a world for a model on a described cluster by predicted step time; measure this "
              "machine (--calibrate) or check the prediction by running the top layouts (--profile)");
  auto o = std::make_shared<TuneOptions>();
  command->add_option("--model", o->model, "The run config whose model and batch to lay out, e.g. configs/gpt-7b.yaml");
  command->add_option("--cluster", o->cluster,
                      "The cluster file, e.g. clusters/h100-8x8.yaml (default: calibration.yaml here, if it exists)");
  // in_range, not CLI::PositiveNumber, whose message prints its bound with 309 digits.
  command->add_option("--world", o->world, "Ranks to lay out (default: every device of the cluster)")
      ->check(in_range(1, 1 << 30, "the ranks to lay out"));
  command->add_option("--seq", o->seq, "Sequence length (default: the config's train.seq_len)")
      ->check(in_range(std::int64_t{1}, std::int64_t{1} << 40, "the tokens of one sequence"));
  command->add_flag("--sp-only", o->sp_only, "Only sequence parallelism over the whole world (dp = tp = pp = 1)");
  command->add_option("--top", o->top, "Layouts the table shows (--profile: layouts it runs, default 3)")
      ->capture_default_str()
      ->check(in_range(1, 1 << 20, "how many layouts to show (--profile: to run), e.g. --top 10"));
  command->add_flag("--json", o->json, "One JSON object per line per layout, excluded ones with their reason");
  command->add_option("--set", o->overrides, "Override one key of the config, e.g. --set train.dtype=bf16 (repeatable)");
  command->add_option("--write-best", o->write_best,
                      "Write the best layout as a run config ready for `wallfacer train` (--profile: the measured best)");
  command->add_flag("--calibrate", o->calibrate,
                    "Measure this machine under mpirun (every rank at once, on --device: GEMM, attention, memory, "
                    "latency and bandwidth of each collective, overlap) and write a cluster file of the world");
  command->add_option("--out", o->calibration.out, "--calibrate: the cluster file to write")->capture_default_str();
  command->add_option("--calibrate-seconds", o->calibration.seconds,
                      "--calibrate: timed seconds per round of each measurement (5 rounds, the median kept; the "
                      "tests shorten it)")
      ->capture_default_str()
      ->check(in_range(1e-3, 60.0));
  add_device_options(*command, o->calibration.device, o->calibration.transport,
                     "--calibrate: where each rank measures (its tensors and every timed region)");
  command->add_option("--profile", o->profile,
                      "Under mpirun: predict every layout of the world for this run config, run the top --top a few "
                      "steps each on synthetic tokens and print predicted beside measured step time and memory");
  command->add_option("--steps", o->steps, "--profile: measured steps per layout after one warm-up step")
      ->capture_default_str()
      ->check(positive());
  command->add_option("--plot", o->plot, "--profile: draw predicted vs measured step times into this PNG (gnuplot)");
  set_action(*command, [o, command] { return dispatch(*o, *command); });
}

}  // namespace wf::cli
