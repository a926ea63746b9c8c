// `wallfacer bench layout CFG.yaml [--set k=v]... [--layouts L,...] [--zero 0,1,2] [--pp 1,2]
// [--pp-schedule 1f1b,gpipe] [--steps N] [--json] [--check]`: every dp × tp × sp layout of the
// current mpirun world (for sp > 1 each WallFacer team size C with C² | sp, ring and Ulysses) at
// each listed pipeline size (default the config's parallel.pp; the layouts of world / pp for the
// rest) and, for pp > 1, each listed schedule (default the config's), that config::validate
// accepts, at each listed ZeRO stage (default the config's; a layout whose replica group dp × sp
// is one rank has nothing to shard and runs at stage 0 only), each trained by a train::Trainer on
// synthetic tokens for one warm-up step and --steps measured ones. Per layout and stage:
//   - step time (the slowest rank's, median over the measured steps), global tokens/s and the
//     achieved model GFLOP/s (tokens/s × Model::train_flops_per_token);
//   - per-rank memory, the max over ranks: this rank's parameter tensors, the bytes it holds for
//     gradients (ReplicaGradients::gradient_bytes: the flat buffer, the ZeRO shard, ZeRO-2's
//     staging pool), AdamW's two moments; the activations: the allocator's peak during
//     one microbatch's forward above what was live before it (what the graph keeps for the
//     backward, plus the forward's transient peak); and the step peak: the allocator's peak
//     during a whole step above what was live before it (activations, gradients, gradient
//     buckets, communication buffers, whichever coexist at the peak);
//   - bytes sent per optimizer step on each process group, summed over ranks, beside
//     train/step_traffic.h's prediction and their ratio; "exact" when every rank's count equals
//     its own prediction;
//   - with pp > 1: the measured bubble (the pipeline runners' waiting over their compute, summed
//     over all ranks and the measured steps, as metrics.jsonl's pp_bubble) beside the schedule's
//     ideal_bubble(), the ranks per core (world / the cores of the job's machines), and per stage
//     (the max over its ranks) the step peak and one microbatch's forward through the stage.
// Then, for layouts that differ only in tp (dp takes up the rest of the world), the per-rank
// parameters + optimizer state of tp k beside tp 1's; for layouts that differ only in the ZeRO
// stage, ZeRO-k's optimizer state, gradient bytes and step time beside ZeRO-0's, with the targets
// at a replica group of 4; for layouts that differ only in the schedule (1F1B and GPipe), per
// stage 1F1B's step peak beside GPipe's / (m / p) + one microbatch. A candidate validate refuses
// is skipped with its reason on one line. With --check the command exits 1 when a measured byte count
// differs from its prediction.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/layout_measure.h"
#include "src/cli/option_checks.h"
#include "src/core/timing.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/models/model.h"
#include "wallfacer/parallel/pipeline_schedule.h"
#include "wallfacer/parallel/sequence_layout.h"
#include "wallfacer/train/pipeline_runner.h"
#include "wallfacer/train/replica_gradients.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/train/trainer.h"

namespace wf::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using parallel::PipelineScheduleKind;
using parallel::SpStrategy;

// ---- layouts -------------------------------------------------------------------------------

// dp, tp, pp, sp, C, the sp strategy, the pipeline schedule and its chunks per rank, and the ZeRO
// stage of a config::ParallelSection; the rest is the config's.
using Layout = config::ParallelSection;

// A --layouts entry: the layout, and what the name gives of its ZeRO stage (otherwise --zero's),
// pipeline size (otherwise --pp's), schedule (otherwise --pp-schedule's) and chunks per rank
// (otherwise the config's parallel.pp_virtual for interleaved, 1 for the others).
struct LayoutSpec {
  Layout layout;
  std::optional<int> zero;
  std::optional<int> pp;
  std::optional<PipelineScheduleKind> schedule;
  std::optional<int> pp_virtual;
};

struct Options {
  std::string path;
  std::vector<std::string> overrides;
  std::vector<std::string> layout_names;
  std::vector<LayoutSpec> layouts;  // parsed from layout_names; empty: config::candidate_layouts
  std::vector<int> zero;            // --zero; empty: the config's parallel.zero
  std::vector<int> pp;              // --pp; empty: the config's parallel.pp
  std::vector<std::string> schedule_names;
  std::vector<PipelineScheduleKind> schedules;  // --pp-schedule; empty: the config's parallel.pp_schedule
  int steps = 3;
  bool json = false;
  bool check = false;
};

int replica_group(const Layout& l) { return l.dp * l.sp; }

// The layout without its stage: "dp4.tp1.sp1", "dp2.tp1.sp2.wallfacer.C1", "dp1.tp1.sp4.ulysses";
// with pp > 1 its size and schedule after dp: "dp1.pp2.1f1b.tp1.sp2.wallfacer.C1",
// "dp1.pp2.interleaved.v2.tp1.sp1".
std::string grid_name(const Layout& l) {
  std::string name = fmt::format("dp{}", l.dp);
  if (l.pp > 1) {
    name += fmt::format(".pp{}.{}", l.pp, parallel::to_string(l.pp_schedule));
    if (l.pp_virtual > 1) name += fmt::format(".v{}", l.pp_virtual);
  }
  name += fmt::format(".tp{}.sp{}", l.tp, l.sp);
  if (l.sp == 1) return name;
  name += fmt::format(".{}", parallel::sp_strategy_name(l.sp_strategy));
  if (l.sp_strategy == SpStrategy::ulysses_wallfacer) {
    name += fmt::format(".U{}{}", l.U, l.ulysses_inner ? "" : ".outer");
  }
  if (l.sp_strategy == SpStrategy::wallfacer || l.sp_strategy == SpStrategy::ulysses_wallfacer) {
    name += fmt::format(".C{}", l.C);
  }
  return name;
}

// With the ZeRO stage: "dp4.tp1.sp1.z2", "dp2.tp1.sp2.wallfacer.C1.z0".
std::string layout_name(const Layout& l) { return fmt::format("{}.z{}", grid_name(l), l.zero); }

// A ZeRO stage of --zero or a layout name's zN.
CLI::Validator zero_stage() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        if (input == "0" || input == "1" || input == "2") return "";
        return fmt::format("'{}' is not a ZeRO stage: 0 (off), 1 (optimizer state sharded) or 2 (gradients too)",
                           input);
      },
      "0|1|2", "zero_stage");
}

// The inverse of layout_name, in any order, with defaults for what is left out: dp, tp, sp 1,
// strategy wallfacer, C 1, the stage --zero's, the pipeline size --pp's and the schedule
// --pp-schedule's ("dp2.sp2.C1" is dp2.tp1.sp2.wallfacer.C1; "dp1.pp2.gpipe.sp2" pipelines it).
LayoutSpec parse_layout(const std::string& text) {
  Layout l;
  std::optional<int> zero, pp, pp_virtual;
  std::optional<PipelineScheduleKind> schedule;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find('.', at), text.size());
    const std::string part = text.substr(at, end - at);
    at = end + 1;
    const auto number = [&](std::size_t prefix) {
      const std::string digits = part.substr(prefix);
      WF_USER_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
                        digits.size() < 6 && std::stoi(digits) >= 1,
                    "--layouts '{}': '{}' needs a positive count (e.g. dp2.tp1.sp2.wallfacer.C1)", text, part);
      return std::stoi(digits);
    };
    if (part == "gpipe" || part == "1f1b" || part == "interleaved") {
      schedule = parallel::parse_pipeline_schedule(part);
    } else if (part.starts_with("pp")) {
      pp = number(2);
    } else if (part.starts_with("v")) {
      pp_virtual = number(1);
    } else if (part.starts_with("dp")) {
      l.dp = number(2);
    } else if (part.starts_with("tp")) {
      l.tp = number(2);
    } else if (part.starts_with("sp")) {
      l.sp = number(2);
    } else if (part.starts_with("C")) {
      l.C = number(1);
    } else if (part.starts_with("U")) {
      l.U = number(1);
    } else if (part == "outer") {  // ulysses-wallfacer with the WallFacer ranks adjacent
      l.ulysses_inner = false;
    } else if (part.starts_with("z")) {
      std::string stage = part.substr(1);
      const std::string problem = zero_stage()(stage);
      WF_USER_CHECK(problem.empty(), "--layouts '{}': {} (e.g. dp4.tp1.sp1.z2)", text, problem);
      zero = std::stoi(stage);
    } else {
      try {
        l.sp_strategy = parallel::parse_sp_strategy(part);
      } catch (const Error&) {
        WF_USER_FAIL("--layouts '{}': unknown part '{}'; expected dpN, ppN, tpN, spN, CN, UN, outer, vN, zN, ring, "
                     "ulysses, wallfacer, ulysses-wallfacer or gpipe, 1f1b, interleaved (e.g. "
                     "dp2.tp1.sp2.wallfacer.C1.z1, dp1.pp2.1f1b.sp2, dp1.tp1.sp8.ulysses-wallfacer.U2.C2)",
                     text, part);
      }
    }
  }
  return {l, zero, pp, schedule, pp_virtual};
}

// The pipeline sizes to run: --pp's, or the config's.
std::vector<int> pipeline_sizes(const Options& o, const config::RunConfig& base) {
  return o.pp.empty() ? std::vector<int>{base.parallel.pp} : o.pp;
}

// What runs, in order: each layout at each of its pipeline sizes, schedules and ZeRO stages, one
// after the other (so a stage's step time is measured beside its ZeRO-0 twin's, and 1F1B's memory
// beside GPipe's, under the same load). Without --layouts, the candidates of world / pp for each
// pp (a pp that does not divide the world has none). A replica group of one rank shards nothing
// (ReplicaGradients runs it at stage 0 whatever it is asked), so it runs once, at 0.
std::vector<Layout> runs(const Options& o, const config::RunConfig& base, int world) {
  const std::vector<int> sizes = pipeline_sizes(o, base);
  std::vector<LayoutSpec> specs = o.layouts;
  if (specs.empty()) {
    for (int pp : sizes) {
      if (world % pp != 0) continue;
      for (const Layout& l : config::candidate_layouts(world / pp)) {
        specs.push_back({l, std::nullopt, pp, std::nullopt, std::nullopt});
      }
    }
  }
  const std::vector<int> listed = o.zero.empty() ? std::vector<int>{base.parallel.zero} : o.zero;
  const std::vector<PipelineScheduleKind> schedules =
      o.schedules.empty() ? std::vector<PipelineScheduleKind>{base.parallel.pp_schedule} : o.schedules;
  std::vector<Layout> out;
  for (const LayoutSpec& spec : specs) {
    for (int pp : spec.pp ? std::vector<int>{*spec.pp} : sizes) {
      // pp = 1 has no schedule: one run, named without it.
      const std::vector<PipelineScheduleKind> kinds =
          pp == 1 ? std::vector<PipelineScheduleKind>{PipelineScheduleKind::one_f_one_b}
                  : spec.schedule ? std::vector<PipelineScheduleKind>{*spec.schedule} : schedules;
      for (PipelineScheduleKind kind : kinds) {
        for (int zero : spec.zero ? std::vector<int>{*spec.zero} : listed) {
          Layout l = spec.layout;
          l.pp = pp;
          l.pp_schedule = kind;
          l.pp_virtual = pp == 1 ? 1
                         : spec.pp_virtual ? *spec.pp_virtual
                         : kind == PipelineScheduleKind::interleaved ? base.parallel.pp_virtual
                                                                      : 1;
          l.zero = replica_group(l) > 1 ? zero : 0;
          const auto same = [&](const Layout& x) { return layout_name(x) == layout_name(l); };
          if (std::none_of(out.begin(), out.end(), same)) out.push_back(l);
        }
      }
    }
  }
  return out;
}

// The benchmark's run of `base` on layout `l`: synthetic tokens, just the steps it trains, no
// validation.
config::RunConfig layout_config(config::RunConfig c, const Layout& l, int steps) {
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  // The config's stage split only where it is the config's pipeline; an even split elsewhere.
  if (l.pp != c.parallel.pp || l.pp_virtual != c.parallel.pp_virtual) c.parallel.pp_layers.clear();
  c.parallel.pp = l.pp;
  c.parallel.pp_schedule = l.pp_schedule;
  c.parallel.pp_virtual = l.pp_virtual;
  c.parallel.sp = l.sp;
  c.parallel.sp_strategy = l.sp > 1 ? l.sp_strategy : SpStrategy::wallfacer;
  const bool teams = l.sp_strategy == SpStrategy::wallfacer || l.sp_strategy == SpStrategy::ulysses_wallfacer;
  c.parallel.C = l.sp > 1 && teams ? l.C : 1;
  c.parallel.U = l.sp > 1 && l.sp_strategy == SpStrategy::ulysses_wallfacer ? l.U : 1;
  c.parallel.ulysses_inner = l.ulysses_inner;
  c.parallel.zero = l.zero;
  return measurement_config(std::move(c), steps);
}

// validate's message without its "invalid config for a world of N ranks: " opening.
std::string skip_reason(const Error& e) {
  std::string message = e.what();
  const std::string opening = "ranks: ";
  const std::size_t at = message.find(opening);
  if (message.starts_with("invalid config") && at != std::string::npos) message.erase(0, at + opening.size());
  return message;
}

// The table's one line: the first clause of the first problem ("model.n_kv_head: tensor
// parallelism splits whole kv heads over parallel.tp = 4, but n_kv_head = 2"); --json has the
// whole reason.
std::string short_reason(const std::string& reason) {
  constexpr std::size_t kWidth = 120;
  std::string line = reason.substr(0, std::min(reason.find("; "), reason.find(". ")));
  if (line.size() > kWidth) line = line.substr(0, kWidth - 3) + "...";
  return line;
}


using Result = LayoutMeasurement;

// ---- output --------------------------------------------------------------------------------

std::string kib(std::int64_t bytes) { return fmt::format("{:.1f}", double(bytes) / 1024.0); }

std::string ratio_text(const GroupRow& g) {
  if (!g.predicted) return "n/a";
  if (*g.predicted == 0) return g.measured == 0 ? "1.000" : "inf";
  return fmt::format("{:.3f}", double(g.measured) / double(*g.predicted));
}

double tokens_per_second(const Result& r) { return double(r.tokens_per_step) / r.step_seconds; }
// Achieved model FLOP/s of the whole job: tokens/s × the model's training FLOPs per token.
double gflops_per_second(const Result& r) { return tokens_per_second(r) * r.flops_per_token / 1e9; }

std::int64_t state_bytes(const Result& r) { return r.parameter_bytes + r.optimizer_bytes; }

void print_header(const Options& o, const config::RunConfig& config, int world) {
  std::printf("wallfacer bench layout: %s (%s), world %d, seq %lld, micro batch %lld, %lld tokens per step, "
              "1 warm-up + %d measured steps\n",
              o.path.c_str(), config::model_facts(config).description.c_str(), world,
              static_cast<long long>(config.train.seq_len), static_cast<long long>(config.train.micro_batch_size),
              static_cast<long long>(config::global_batch_sequences(config) * config.train.seq_len), o.steps);
  std::printf("memory: per rank, max over ranks, KiB; activations = peak of one microbatch's forward (with pp: "
              "through the rank's stage), step peak = peak of a step, each above what was live before it\n");
  std::printf("traffic: bytes sent per step on each group, summed over ranks; predicted = train/step_traffic.h; "
              "exact = every rank's count equals its prediction\n");
}

void print_text(const Result& r) {
  std::printf("%-29s step %8.2f ms %9.1f tokens/s %7.1f GFLOP/s  params %8s  grads %8s  optimizer %8s  activations "
              "%8s  step peak %8s\n",
              layout_name(r.layout).c_str(), r.step_seconds * 1e3, tokens_per_second(r), gflops_per_second(r),
              kib(r.parameter_bytes).c_str(),
              kib(r.gradient_bytes).c_str(), kib(r.optimizer_bytes).c_str(), kib(r.activation_bytes).c_str(),
              kib(r.step_peak_bytes).c_str());
  if (r.layout.pp > 1) {
    const auto per_stage = [](const std::vector<std::int64_t>& bytes) {
      std::vector<std::string> out;
      for (std::int64_t b : bytes) out.push_back(kib(b));
      return fmt::format("{}", fmt::join(out, " / "));
    };
    const int world = r.layout.dp * r.layout.tp * r.layout.pp * r.layout.sp;
    std::printf("    pp       bubble measured %.3f  ideal %.3f (p %d, m %lld, %s)  per stage KiB: step peak %s, one "
                "microbatch %s  (%d ranks x %d threads on %d cores: %.2f ranks per core%s)\n",
                r.bubble, r.ideal_bubble, r.layout.pp, static_cast<long long>(r.microbatches),
                parallel::to_string(r.layout.pp_schedule).c_str(), per_stage(r.stage_step_peak_bytes).c_str(),
                per_stage(r.stage_microbatch_bytes).c_str(), world, r.threads, r.cores, r.ranks_per_core(),
                r.ranks_per_core() > 1.0 ? ", oversubscribed: ranks time-share cores" : "");
  }
  for (const GroupRow& g : r.groups) {
    std::printf("    %-12s measured %12lld  predicted %12s  ratio %6s  %s\n", g.group.c_str(),
                static_cast<long long>(g.measured), g.predicted ? fmt::format("{}", *g.predicted).c_str() : "n/a",
                ratio_text(g).c_str(), !g.predicted ? "" : g.exact ? "exact" : "DIFFERS");
  }
}

Json result_json(const Result& r) {
  Json j;
  j["layout"] = layout_name(r.layout);
  j["dp"] = r.layout.dp;
  j["tp"] = r.layout.tp;
  j["sp"] = r.layout.sp;
  j["sp_strategy"] = r.layout.sp > 1 ? parallel::sp_strategy_name(r.layout.sp_strategy) : "none";
  j["C"] = r.layout.C;
  j["U"] = r.layout.U;
  j["ulysses_inner"] = r.layout.ulysses_inner;
  j["pp"] = r.layout.pp;
  if (r.layout.pp > 1) {
    j["pp_schedule"] = parallel::to_string(r.layout.pp_schedule);
    j["pp_virtual"] = r.layout.pp_virtual;
    j["microbatches"] = r.microbatches;
    j["bubble"] = r.bubble;
    j["bubble_ideal"] = r.ideal_bubble;
    j["cores"] = r.cores;
    j["threads_per_rank"] = r.threads;
    j["ranks_per_core"] = r.ranks_per_core();
    j["stage_step_peak_bytes"] = r.stage_step_peak_bytes;
    j["stage_microbatch_bytes"] = r.stage_microbatch_bytes;
  }
  j["zero"] = r.layout.zero;
  j["step_ms"] = r.step_seconds * 1e3;
  j["tokens_per_s"] = tokens_per_second(r);
  j["gflops_per_s"] = gflops_per_second(r);
  j["tokens_per_step"] = r.tokens_per_step;
  j["parameter_bytes"] = r.parameter_bytes;
  j["gradient_bytes"] = r.gradient_bytes;
  j["optimizer_bytes"] = r.optimizer_bytes;
  j["activation_bytes"] = r.activation_bytes;
  j["step_peak_bytes"] = r.step_peak_bytes;
  j["buckets"] = {{"count", r.buckets.buckets},
                  {"launched_in_backward", r.buckets.launched_in_backward},
                  {"launched_at_end", r.buckets.launched_at_end}};
  Json traffic = Json::array();
  for (const GroupRow& g : r.groups) {
    traffic.push_back({{"group", g.group},
                       {"measured_bytes", g.measured},
                       {"predicted_bytes", g.predicted ? Json(*g.predicted) : Json(nullptr)},
                       {"exact", g.predicted ? Json(g.exact) : Json(nullptr)}});
  }
  j["traffic"] = traffic;
  j["traffic_exact"] = r.traffic_exact();
  return j;
}

// Layouts that differ only in tp: each tp > 1 result beside the tp = 1 one with the same sp,
// strategy and C.
void print_tp_ratios(const std::vector<Result>& results, bool json) {
  bool any = false;
  for (const Result& r : results) {
    if (r.layout.tp == 1) continue;
    Layout base = r.layout;
    base.dp *= base.tp;
    base.tp = 1;
    const auto b = std::find_if(results.begin(), results.end(),
                                [&](const Result& x) { return layout_name(x.layout) == layout_name(base); });
    if (b == results.end()) continue;
    any = true;
    const double ratio = double(state_bytes(r)) / double(state_bytes(*b));
    if (json) {
      std::printf("%s\n", Json{{"tp_ratio", layout_name(r.layout)},
                               {"baseline", layout_name(base)},
                               {"parameter_optimizer_bytes", state_bytes(r)},
                               {"baseline_parameter_optimizer_bytes", state_bytes(*b)},
                               {"ratio", ratio}}
                              .dump()
                              .c_str());
    } else {
      std::printf("tp %d / tp 1: %s vs %s: parameters + optimizer per rank %lld vs %lld bytes, ratio %.3f\n",
                  r.layout.tp, layout_name(r.layout).c_str(), layout_name(base).c_str(),
                  static_cast<long long>(state_bytes(r)), static_cast<long long>(state_bytes(*b)), ratio);
    }
  }
  if (!any && !json) std::printf("tp k / tp 1: no pair of layouts differing only in tp ran\n");
}

// ZeRO-k's per-rank memory and step time over ZeRO-0's. The targets hold at a replica group of
// 4 (docs/parallelism.md): each replica keeps a quarter of the optimizer state (plus bucket
// padding) under ZeRO-1 and 2, a quarter of the gradients plus the staging buffers in flight
// under ZeRO-2 (ZeRO-1 keeps the full gradient buffer and its shard: no target), and the step
// costs about what ZeRO-0's does (a reduce-scatter + all-gather moves what an all-reduce does).
struct ZeroTargets {
  std::optional<double> optimizer, gradients, step_time;
};

ZeroTargets zero_targets(const Layout& l) {
  if (replica_group(l) != 4) return {};
  return {0.27, l.zero == 2 ? std::optional<double>(0.3) : std::nullopt, 1.10};
}

struct ZeroRatio {
  const Result* zero_k;
  const Result* zero_0;
  double optimizer() const { return double(zero_k->optimizer_bytes) / double(zero_0->optimizer_bytes); }
  double gradients() const { return double(zero_k->gradient_bytes) / double(zero_0->gradient_bytes); }
  double persistent_gradients() const {
    return double(zero_k->persistent_gradient_bytes) / double(zero_0->persistent_gradient_bytes);
  }
  double step_time() const { return zero_k->step_seconds / zero_0->step_seconds; }
};

// Each ZeRO ≥ 1 result with the ZeRO-0 result of the same layout, when that ran.
std::vector<ZeroRatio> zero_ratios(const std::vector<Result>& results) {
  std::vector<ZeroRatio> out;
  for (const Result& r : results) {
    if (r.layout.zero == 0) continue;
    Layout base = r.layout;
    base.zero = 0;
    const auto b = std::find_if(results.begin(), results.end(),
                                [&](const Result& x) { return layout_name(x.layout) == layout_name(base); });
    if (b != results.end()) out.push_back({&r, &*b});
  }
  return out;
}

// "0.254 (target <= 0.27)", or just the ratio where no target applies.
std::string against(double ratio, std::optional<double> target) {
  const std::string text = fmt::format("{:.3f}", ratio);
  return target ? fmt::format("{} (target <= {:.2f})", text, *target) : text;
}

Json target_json(std::optional<double> target) { return target ? Json(*target) : Json(nullptr); }

void print_zero_ratios(const std::vector<Result>& results, bool json) {
  const std::vector<ZeroRatio> ratios = zero_ratios(results);
  for (const ZeroRatio& z : ratios) {
    const Layout& l = z.zero_k->layout;
    const ZeroTargets t = zero_targets(l);
    if (json) {
      std::printf("%s\n", Json{{"zero_ratio", layout_name(l)},
                               {"baseline", layout_name(z.zero_0->layout)},
                               {"zero", l.zero},
                               {"replica_group", replica_group(l)},
                               {"optimizer_bytes", z.zero_k->optimizer_bytes},
                               {"baseline_optimizer_bytes", z.zero_0->optimizer_bytes},
                               {"optimizer_ratio", z.optimizer()},
                               {"optimizer_target", target_json(t.optimizer)},
                               {"gradient_bytes", z.zero_k->gradient_bytes},
                               {"baseline_gradient_bytes", z.zero_0->gradient_bytes},
                               {"gradient_ratio", z.gradients()},
                               {"gradient_target", target_json(t.gradients)},
                               {"persistent_gradient_bytes", z.zero_k->persistent_gradient_bytes},
                               {"persistent_gradient_ratio", z.persistent_gradients()},
                               {"step_ms", z.zero_k->step_seconds * 1e3},
                               {"baseline_step_ms", z.zero_0->step_seconds * 1e3},
                               {"step_time_ratio", z.step_time()},
                               {"step_time_target", target_json(t.step_time)}}
                              .dump()
                              .c_str());
    } else {
      // "optimizer 6427.0 vs 25708.0 KiB: 0.250 (target <= 0.27)"
      const auto column = [](const char* what, double k, double zero, const std::string& ratio) {
        return fmt::format("{} {:.1f} vs {:.1f}: {}", what, k, zero, ratio);
      };
      std::printf("ZeRO-%d / ZeRO-0 at %s (replica group %d): %s, %s (without the staging pool %.3f), %s%s\n",
                  l.zero, grid_name(l).c_str(), replica_group(l),
                  column("optimizer KiB", double(z.zero_k->optimizer_bytes) / 1024.0,
                         double(z.zero_0->optimizer_bytes) / 1024.0, against(z.optimizer(), t.optimizer))
                      .c_str(),
                  column("gradients KiB", double(z.zero_k->gradient_bytes) / 1024.0,
                         double(z.zero_0->gradient_bytes) / 1024.0, against(z.gradients(), t.gradients))
                      .c_str(),
                  z.persistent_gradients(),
                  column("step time ms", z.zero_k->step_seconds * 1e3, z.zero_0->step_seconds * 1e3,
                         against(z.step_time(), t.step_time))
                      .c_str(),
                  replica_group(l) == 4 ? "" : "; the targets are for a replica group of 4");
    }
  }
  if (ratios.empty() && !json && std::any_of(results.begin(), results.end(), [](const Result& r) {
        return r.layout.zero > 0;
      })) {
    std::printf("ZeRO-k / ZeRO-0: no ZeRO-0 twin ran (add 0 to --zero)\n");
  }
}

// 1F1B's memory against GPipe's: for each 1F1B result with a GPipe twin (the same layout, schedule
// gpipe), per stage the step peak of 1F1B beside GPipe's / (m / p) + one microbatch (1F1B's run's
// forward of one microbatch through the stage): GPipe holds all m microbatches' activations, 1F1B
// at most p of them (min(p - stage, m)).
void print_pp_memory(const std::vector<Result>& results, bool json) {
  for (const Result& r : results) {
    if (r.layout.pp == 1 || r.layout.pp_schedule != PipelineScheduleKind::one_f_one_b) continue;
    Layout base = r.layout;
    base.pp_schedule = PipelineScheduleKind::gpipe;
    const auto b = std::find_if(results.begin(), results.end(),
                                [&](const Result& x) { return layout_name(x.layout) == layout_name(base); });
    if (b == results.end()) continue;
    const double per = double(r.microbatches) / double(r.layout.pp);  // m / p
    bool all_met = true;
    Json stages = Json::array();
    std::vector<std::string> text;
    for (std::size_t s = 0; s < r.stage_step_peak_bytes.size() && s < b->stage_step_peak_bytes.size(); ++s) {
      const double bound = double(b->stage_step_peak_bytes[s]) / per + double(r.stage_microbatch_bytes[s]);
      const bool met = double(r.stage_step_peak_bytes[s]) <= bound;
      all_met = all_met && met;
      stages.push_back({{"stage", s},
                        {"one_f_one_b_step_peak_bytes", r.stage_step_peak_bytes[s]},
                        {"gpipe_step_peak_bytes", b->stage_step_peak_bytes[s]},
                        {"microbatch_bytes", r.stage_microbatch_bytes[s]},
                        {"bound_bytes", bound},
                        {"met", met}});
      text.push_back(fmt::format("stage {}: 1F1B {} KiB vs GPipe {} KiB / {:.2f} + one microbatch {} KiB = {:.1f} KiB: "
                                 "{}",
                                 s, kib(r.stage_step_peak_bytes[s]), kib(b->stage_step_peak_bytes[s]), per,
                                 kib(r.stage_microbatch_bytes[s]), bound / 1024.0, met ? "met" : "NOT MET"));
    }
    if (json) {
      std::printf("%s\n", Json{{"pp_memory", layout_name(r.layout)},
                               {"baseline", layout_name(base)},
                               {"pp", r.layout.pp},
                               {"microbatches", r.microbatches},
                               {"stages", stages},
                               {"met", all_met}}
                              .dump()
                              .c_str());
    } else {
      std::printf("1F1B / GPipe step peak at %s (p %d, m %lld; target 1F1B <= GPipe / (m/p) + one microbatch): %s\n",
                  grid_name(r.layout).c_str(), r.layout.pp, static_cast<long long>(r.microbatches),
                  fmt::format("{}", fmt::join(text, "; ")).c_str());
    }
  }
}

// ---- the command ---------------------------------------------------------------------------

int run(const Options& o) {
  comm::Runtime& runtime = comm::Runtime::get();
  const int world = runtime.world_size();
  const bool root = runtime.rank() == 0;
  const config::RunConfig base = config::load_config(o.path, o.overrides);
  const std::vector<Layout> layouts = runs(o, base, world);
  // As `wallfacer train`: the smallest machine of the job decides the memory check.
  const double machine = job_machine_memory_bytes();
  if (layouts.empty()) {  // only pipeline sizes that do not divide the world
    if (root) {
      print_error(fmt::format("bench layout: no pipeline size of --pp divides the world of {} ranks", world));
    }
    return kExitRuntimeError;
  }
  if (root && !o.json) print_header(o, layout_config(base, layouts.front(), o.steps), world);
  if (root && o.layouts.empty()) {
    for (int pp : pipeline_sizes(o, base)) {
      if (world % pp == 0) continue;
      const std::string reason = fmt::format("parallel.pp = {} does not divide the world of {} ranks", pp, world);
      if (o.json) std::printf("%s\n", Json{{"layout", fmt::format("pp{}", pp)}, {"skipped", reason}}.dump().c_str());
      else std::printf("%-29s skipped: %s\n", fmt::format("pp{}", pp).c_str(), reason.c_str());
    }
  }

  std::vector<Result> results;
  for (const Layout& layout : layouts) {
    const config::RunConfig config = layout_config(base, layout, o.steps);
    try {
      config::validate(config, world, config::ValidateScope::this_machine, machine);
    } catch (const Error& e) {  // the same verdict and message on every rank
      if (root) {
        if (o.json) std::printf("%s\n", Json{{"layout", layout_name(layout)}, {"skipped", skip_reason(e)}}.dump().c_str());
        else std::printf("%-29s skipped: %s\n", layout_name(layout).c_str(), short_reason(skip_reason(e)).c_str());
        std::fflush(stdout);
      }
      continue;
    }
    results.push_back(measure_layout(config, o.steps));
    if (root) {
      if (o.json) std::printf("%s\n", result_json(results.back()).dump().c_str());
      else print_text(results.back());
      std::fflush(stdout);
    }
  }
  if (root) {
    print_tp_ratios(results, o.json);
    print_zero_ratios(results, o.json);
    print_pp_memory(results, o.json);
  }
  if (results.empty()) {
    if (root) print_error("bench layout: no layout could run (each was skipped above)");
    return kExitRuntimeError;
  }
  if (o.check) {
    for (const Result& r : results) {
      if (r.traffic_exact()) continue;
      if (root) print_error(fmt::format("bench layout {}: measured traffic differs from train/step_traffic.h", layout_name(r.layout)));
      return kExitRuntimeError;
    }
  }
  return kExitOk;
}

}  // namespace

void add_bench_layout_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* command = bench.add_subcommand(
      "layout",
      "every dp x tp x sp layout of the mpirun world for a run config: step time, tokens/s, per-rank memory, bytes "
      "per group beside the predicted ones");
  command->add_option("config", o->path, "The run config, e.g. configs/gpt-tiny.yaml")->required();
  command->add_option("--set", o->overrides, "Override one key, e.g. --set train.seq_len=64 (repeatable)");
  command->add_option("--layouts", o->layout_names,
                      "comma-separated layouts to run instead of every candidate, e.g. dp2.tp1.sp2.wallfacer.C1,dp4 "
                      "(a trailing .zN fixes its ZeRO stage, overriding --zero)")
      ->delimiter(',');
  command->add_option("--zero", o->zero,
                      "comma-separated ZeRO stages to run each layout at, e.g. 0,1,2 (default: the config's "
                      "parallel.zero); a layout whose replica group dp x sp is one rank runs at 0 only")
      ->delimiter(',')
      ->check(zero_stage());
  command->add_option("--pp", o->pp,
                      "comma-separated pipeline sizes to run, e.g. 1,2,4 (default: the config's parallel.pp); with "
                      "pp > 1 the layouts of world / pp for the rest")
      ->delimiter(',')
      ->check(positive());
  command->add_option("--pp-schedule", o->schedule_names,
                      "comma-separated pipeline schedules to run each pp > 1 layout with: gpipe, 1f1b, interleaved "
                      "(default: the config's parallel.pp_schedule; interleaved takes parallel.pp_virtual chunks)")
      ->delimiter(',');
  command->add_option("--steps", o->steps, "measured steps after one warm-up step (the median is printed)")
      ->check(positive());
  command->add_flag("--json", o->json, "one JSON object per line per layout");
  command->add_flag("--check", o->check, "exit 1 when a measured byte count differs from its prediction");
  set_action(*command, [o] {
    try {
      for (const std::string& text : o->layout_names) o->layouts.push_back(parse_layout(text));
      for (const std::string& name : o->schedule_names) {
        try {
          o->schedules.push_back(parallel::parse_pipeline_schedule(name));
        } catch (const Error& e) {
          WF_USER_FAIL("--pp-schedule: {}", e.what());
        }
      }
    } catch (const Error& e) {
      print_error(e.what());
      return kExitUsageError;
    }
    // run_main: an error on one rank ends every rank (no rank waits forever in a collective).
    return comm::run_main(0, nullptr, [&] { return run(*o); });
  });
}

}  // namespace wf::cli
