// tune::search_layouts: the layout space of tune/search.h, checked by validate and predicted.
#include "wallfacer/tune/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "wallfacer/config/model_schema.h"
#include "wallfacer/core/error.h"

namespace wf::tune {
namespace {

using parallel::SpStrategy;

constexpr const char* kCheckpointKey = "checkpoint_attention";

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> out;
  for (std::int64_t k = 1; k <= n; ++k) {
    if (n % k == 0) out.push_back(static_cast<int>(k));
  }
  return out;
}

bool has_model_key(const config::RunConfig& c, std::string_view key) {
  return config::model_schema(c.model.name).find(key) != nullptr;
}

// The sp variants of a group of sp ranks: (strategy, C, placement, U, which dimension is inner).
struct SpVariant {
  SpStrategy strategy;
  int C = 1;
  comm::Placement placement = comm::Placement::collectives_intra;
  int U = 1;
  bool ulysses_inner = true;
};
std::vector<SpVariant> sp_variants(int sp) {
  if (sp == 1) return {{SpStrategy::wallfacer}};
  std::vector<SpVariant> out{{SpStrategy::ring}, {SpStrategy::ulysses}};
  // WallFacer over `ranks` ranks: every C > min_c with C² | ranks, in both placements (with
  // ranks = C² every sub-ring is one rank, so both put the ranks in the same places).
  const auto teams = [&](SpStrategy strategy, int ranks, int min_c, int U, bool inner) {
    for (int C : comm::valid_team_sizes(ranks)) {
      if (C <= min_c) continue;
      out.push_back({strategy, C, comm::Placement::collectives_intra, U, inner});
      if (ranks != C * C && C > 1) out.push_back({strategy, C, comm::Placement::p2p_intra, U, inner});
    }
  };
  teams(SpStrategy::wallfacer, sp, 1, 1, true);  // WallFacer with C = 1 is ring attention
  // The hybrid: U Ulysses ranks × sp/U WallFacer ranks (C = 1: USP's Ulysses × ring), with
  // either dimension on adjacent ranks. U = 1 and U = sp are WallFacer and Ulysses themselves.
  for (int U = 2; U < sp; ++U) {
    if (sp % U != 0) continue;
    for (const bool inner : {true, false}) teams(SpStrategy::ulysses_wallfacer, sp / U, 0, U, inner);
  }
  return out;
}

// Why the cost model says a valid layout cannot run: its memory per rank beyond the device's.
std::string memory_problem(const Prediction& p, const ClusterSpec& cluster) {
  const double have = cluster.device.memory_gib * static_cast<double>(1 << 30);
  if (p.memory_bytes() <= have) return "";
  std::string parts;
  for (const Term& t : p.memory) {
    parts += fmt::format("{}{} {:.1f}", parts.empty() ? "" : ", ", t.name, t.value / double(1 << 30));
  }
  return fmt::format("memory: needs {:.1f} GiB per rank ({}) but a {} has {:.0f} GiB", p.memory_bytes() / double(1 << 30),
                     parts, cluster.device.name, cluster.device.memory_gib);
}

}  // namespace

config::RunConfig with_seq_len(config::RunConfig c, std::int64_t seq_len) {
  if (seq_len <= 0) return c;
  c.train.seq_len = seq_len;
  if (has_model_key(c, "max_seq_len") && std::stoll(c.model.get("max_seq_len")) < seq_len) {
    c.model.set("max_seq_len", seq_len);
  }
  return c;
}

bool checkpoints_attention(const config::RunConfig& c) {
  return has_model_key(c, kCheckpointKey) && c.model.get(kCheckpointKey) == "true";
}

std::string strategy_label(const config::RunConfig& c) {
  const config::ParallelSection& p = c.parallel;
  if (p.sp == 1) return "none";
  if (p.sp_strategy == SpStrategy::wallfacer) return fmt::format("wallfacer-{}", p.C);
  return parallel::sp_strategy_name(p.sp_strategy);  // the hybrid: every U and C together
}

std::vector<LabelPart> layout_parts(const config::RunConfig& c) {
  const config::ParallelSection& p = c.parallel;
  std::vector<LabelPart> parts{
      {fmt::format("dp{}", p.dp), "data-parallel replicas (parallel.dp)"},
      {fmt::format("tp{}", p.tp), "tensor-parallel ranks splitting each layer's weights (parallel.tp)"},
      {fmt::format("pp{}", p.pp), "pipeline stages (parallel.pp)"},
      {fmt::format("sp{}", p.sp), "sequence-parallel ranks splitting each sequence (parallel.sp)"}};
  if (p.sp > 1) {
    parts.push_back({std::string(parallel::sp_strategy_name(p.sp_strategy)),
                     "the sequence-parallel attention (parallel.sp_strategy)"});
    if (p.sp_strategy == SpStrategy::ulysses_wallfacer) {
      parts.push_back({fmt::format("U{}", p.U), fmt::format("Ulysses all-to-all over {} ranks, WallFacer over "
                                                            "sp / U = {} (parallel.U)", p.U, p.sp / std::max(p.U, 1))});
      parts.push_back({p.ulysses_inner ? "inner" : "outer",
                       p.ulysses_inner ? "the Ulysses ranks are adjacent (parallel.ulysses_inner: true)"
                                       : "the WallFacer ranks are adjacent (parallel.ulysses_inner: false)"});
    }
    if (p.sp_strategy == SpStrategy::wallfacer || p.sp_strategy == SpStrategy::ulysses_wallfacer) {
      parts.push_back({fmt::format("C{}", p.C), "WallFacer team size, C = 1 being plain ring attention (parallel.C)"});
      parts.push_back({std::string(comm::placement_name(p.placement)),
                       p.placement == comm::Placement::collectives_intra
                           ? "team members on adjacent ranks (parallel.placement)"
                           : "sub-ring members on adjacent ranks (parallel.placement)"});
    }
  }
  if (p.pp > 1) {
    parts.push_back({parallel::to_string(p.pp_schedule), "the pipeline schedule (parallel.pp_schedule)"});
    if (p.pp_virtual > 1) {
      parts.push_back({fmt::format("v{}", p.pp_virtual), "model chunks per pipeline rank (parallel.pp_virtual)"});
    }
  }
  if (c.train.micro_batch_size > 1) {
    parts.push_back({fmt::format("mb{}", c.train.micro_batch_size),
                     "sequences per micro batch (train.micro_batch_size)"});
  }
  parts.push_back({fmt::format("z{}", p.zero),
                   "ZeRO stage: 0 off, 1 optimizer state sharded, 2 gradients too (parallel.zero)"});
  if (checkpoints_attention(c)) {
    parts.push_back({"ckpt", "activations recomputed from the attention output (model.checkpoint_attention)"});
  }
  return parts;
}

std::string layout_label(const config::RunConfig& c) {
  std::string name;
  for (const LabelPart& part : layout_parts(c)) name += (name.empty() ? "" : ".") + part.text;
  return name;
}

std::vector<Candidate> search_layouts(const config::RunConfig& user, const ClusterSpec& cluster,
                                      const SearchOptions& options) {
  const int world = options.world > 0 ? options.world : cluster.devices();
  WF_USER_CHECK(world <= cluster.devices(), "--world {}: cluster '{}' has {} devices ({} nodes x {}); ask for at most {}",
                world, cluster.name, cluster.devices(), cluster.nodes, cluster.devices_per_node, cluster.devices());
  const config::RunConfig base = with_seq_len(user, options.seq_len);
  const std::int64_t sequences = config::global_batch_sequences(base);
  const bool checkpoint_key = has_model_key(base, kCheckpointKey);

  std::vector<Candidate> out;
  const auto consider = [&](config::RunConfig c) {
    Candidate candidate;
    std::vector<std::string> problems = config::validation_problems(c, world, config::ValidateScope::any_machine);
    if (problems.empty()) {
      candidate.prediction = predict_step(c, cluster);
      candidate.excluded = memory_problem(candidate.prediction, cluster);
    } else {
      candidate.excluded = fmt::format("{}", fmt::join(problems, "; "));
    }
    candidate.config = std::move(c);
    out.push_back(std::move(candidate));
  };

  for (int tp : divisors(world)) {
    for (int pp : divisors(world / tp)) {
      for (int sp : divisors(world / (tp * pp))) {
        const int dp = world / (tp * pp * sp);
        if (options.sp_only && sp != world) continue;
        // Micro batch sizes that split this replica's sequences evenly (validate refuses the
        // rest, and the one candidate with dp not dividing the batch says why).
        std::vector<int> micro_batches = sequences % dp == 0 ? divisors(sequences / dp) : std::vector<int>{1};
        struct Schedule {
          parallel::PipelineScheduleKind kind;
          int chunks;
        };
        std::vector<Schedule> schedules{{parallel::PipelineScheduleKind::one_f_one_b, 1}};
        if (pp > 1) {
          schedules.push_back({parallel::PipelineScheduleKind::gpipe, 1});
          schedules.push_back({parallel::PipelineScheduleKind::interleaved, 2});
        }
        const int replicas = dp * sp;
        for (const SpVariant& v : sp_variants(sp)) {
          for (const Schedule& schedule : schedules) {
            for (int mb : micro_batches) {
              for (int zero = 0; zero <= (replicas > 1 ? 2 : 0); ++zero) {
                for (int ckpt = 0; ckpt <= (checkpoint_key ? 1 : 0); ++ckpt) {
                  config::RunConfig c = base;
                  config::ParallelSection& p = c.parallel;
                  p.dp = dp, p.tp = tp, p.pp = pp, p.sp = sp;
                  p.sp_strategy = v.strategy, p.C = v.C, p.placement = v.placement;
                  p.U = v.U, p.ulysses_inner = v.ulysses_inner;
                  p.pp_schedule = schedule.kind, p.pp_virtual = schedule.chunks;
                  p.pp_layers.clear();
                  p.zero = zero;
                  c.train.micro_batch_size = mb;
                  c.train.global_batch_size = sequences;
                  if (checkpoint_key) c.model.set(kCheckpointKey, ckpt == 1);
                  consider(std::move(c));
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.excluded.empty() != b.excluded.empty()) return a.excluded.empty();
    if (!a.excluded.empty()) return false;
    return a.prediction.step_seconds < b.prediction.step_seconds;
  });
  return out;
}

}  // namespace wf::tune
