#include "wallfacer/parallel/pipeline_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>

#include "wallfacer/core/error.h"

namespace wf::parallel {

namespace {

using Op = PipelineAction::Op;

constexpr std::string_view kMicrobatchCount =
    "the microbatch count (train.global_batch_size / (parallel.dp x train.micro_batch_size))";

std::size_t at(int i) { return static_cast<std::size_t>(i); }

// GPipe with a flush: all forwards, then all backwards, in the same microbatch order on every
// rank (Megatron's and torchgpipe's fill-drain). Reverse order would take as long with equal
// costs; forward order accumulates the gradients in the same order as 1F1B, so the two
// schedules give bitwise the same step.
std::vector<PipelineAction> gpipe(int m) {
  std::vector<PipelineAction> out;
  for (int i = 0; i < m; ++i) out.push_back({Op::forward, i, 0});
  for (int i = 0; i < m; ++i) out.push_back({Op::backward, i, 0});
  return out;
}

// PipeDream-Flush (Megatron's forward_backward_pipelining_without_interleaving): rank r warms
// up with enough forwards to fill the stages after it, then alternates one forward and one
// backward, so it never holds more than p - r microbatches' activations.
std::vector<PipelineAction> one_f_one_b(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<PipelineAction> out;
  int next_forward = 0;
  int next_backward = 0;
  for (int i = 0; i < warmup; ++i) out.push_back({Op::forward, next_forward++, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({Op::forward, next_forward++, 0});
    out.push_back({Op::backward, next_backward++, 0});
  }
  while (next_backward < m) out.push_back({Op::backward, next_backward++, 0});
  return out;
}

// Megatron's forward_backward_pipelining_with_interleaving. The k-th of the m*v forward units
// of a rank runs microbatch (k / (p*v)) * p + k % p of chunk (k / p) % v: groups of p
// microbatches go through chunk 0, then chunk 1, ..., before the next group starts. Backward
// units take the same microbatches through the chunks in reverse.
PipelineAction interleaved_unit(int k, int p, int v, Op op) {
  const int microbatch = (k / (p * v)) * p + k % p;
  const int in_group = (k / p) % v;
  return {op, microbatch, op == Op::forward ? in_group : v - 1 - in_group};
}

std::vector<PipelineAction> interleaved(int p, int m, int v, int rank) {
  const int total = m * v;
  // Rank r's first backward is microbatch 0 of its last chunk. Before it, r forwards the first
  // group through its earlier chunks ((v-1)*p units), then microbatch 0 goes through the p-r-1
  // stages after r and back, time for 2*(p-r-1) more forwards.
  const int warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  std::vector<PipelineAction> out;
  int next_forward = 0;
  int next_backward = 0;
  for (int i = 0; i < warmup; ++i) out.push_back(interleaved_unit(next_forward++, p, v, Op::forward));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(interleaved_unit(next_forward++, p, v, Op::forward));
    out.push_back(interleaved_unit(next_backward++, p, v, Op::backward));
  }
  while (next_backward < total) out.push_back(interleaved_unit(next_backward++, p, v, Op::backward));
  return out;
}

}  // namespace

std::string to_string(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::gpipe: return "gpipe";
    case PipelineScheduleKind::one_f_one_b: return "1f1b";
    case PipelineScheduleKind::interleaved: return "interleaved";
  }
  WF_FAIL("unknown PipelineScheduleKind {}", static_cast<int>(kind));
}

PipelineScheduleKind parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe") return PipelineScheduleKind::gpipe;
  if (name == "1f1b") return PipelineScheduleKind::one_f_one_b;
  if (name == "interleaved") return PipelineScheduleKind::interleaved;
  WF_USER_FAIL(
      "unknown pipeline schedule '{}': valid values of parallel.pp_schedule are gpipe (all forwards, "
      "then all backwards), 1f1b (one forward, one backward; activations of at most pp microbatches), "
      "interleaved (1f1b over parallel.pp_virtual model chunks per rank)",
      name);
}

std::string to_string(const PipelineAction& action, int virtual_stages) {
  const char op = action.op == Op::forward ? 'F' : 'B';
  if (virtual_stages == 1) return fmt::format("{}{}", op, action.microbatch);
  return fmt::format("{}{}.{}", op, action.microbatch, action.chunk);
}

std::string to_string(const std::vector<PipelineAction>& actions, int virtual_stages) {
  std::string out;
  for (const PipelineAction& action : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(action, virtual_stages);
  }
  return out;
}

std::vector<std::string> pipeline_schedule_problems(PipelineScheduleKind kind, int p, int m, int v) {
  std::vector<std::string> problems;
  const std::string name = to_string(kind);
  if (p < 1) problems.push_back(fmt::format("parallel.pp is {}: a pipeline needs at least 1 stage; set parallel.pp >= 1", p));
  if (m < 1) {
    problems.push_back(fmt::format("{} is {}: a step needs at least 1 microbatch; raise train.global_batch_size to at "
                                   "least parallel.dp x train.micro_batch_size",
                                   kMicrobatchCount, m));
  }
  if (v < 1) {
    problems.push_back(fmt::format("parallel.pp_virtual is {}: each rank needs at least 1 model chunk; set "
                                   "parallel.pp_virtual >= 1",
                                   v));
  }
  if (kind != PipelineScheduleKind::interleaved) {
    if (v > 1) {
      problems.push_back(fmt::format("parallel.pp_virtual is {} but parallel.pp_schedule {} runs 1 model chunk per rank; "
                                     "set parallel.pp_schedule: interleaved, or parallel.pp_virtual: 1",
                                     v, name));
    }
    return problems;
  }
  if (p >= 1 && p < 2) {
    problems.push_back(fmt::format("parallel.pp_schedule interleaved needs parallel.pp >= 2 (it is {}): with 1 stage "
                                   "there is no bubble to shrink; use parallel.pp_schedule: 1f1b",
                                   p));
  }
  if (v >= 1 && v < 2) {
    problems.push_back(fmt::format("parallel.pp_schedule interleaved needs parallel.pp_virtual >= 2 model chunks per "
                                   "rank (it is {}); set parallel.pp_virtual: 2, or parallel.pp_schedule: 1f1b",
                                   v));
  }
  if (p >= 2 && m >= 1 && m % p != 0) {
    const int up = (m / p + 1) * p;
    problems.push_back(fmt::format("parallel.pp_schedule interleaved needs {} = {} to be a multiple of parallel.pp = {} "
                                   "(microbatches go through the chunks in groups of pp); raise "
                                   "train.global_batch_size so that it is {}, or use parallel.pp_schedule: 1f1b",
                                   kMicrobatchCount, m, p, up));
  }
  return problems;
}

PipelineSchedule::PipelineSchedule(PipelineScheduleKind kind, int stages, int microbatches, int virtual_stages)
    : kind_(kind), stages_(stages), microbatches_(microbatches), virtual_stages_(virtual_stages) {
  const std::vector<std::string> problems = pipeline_schedule_problems(kind, stages, microbatches, virtual_stages);
  WF_USER_CHECK(problems.empty(), "pipeline schedule {} with pp {}, {} microbatches, pp_virtual {} cannot run: {}",
                to_string(kind), stages, microbatches, virtual_stages, fmt::join(problems, "; "));
  actions_.reserve(at(stages));
  for (int rank = 0; rank < stages; ++rank) {
    switch (kind) {
      case PipelineScheduleKind::gpipe: actions_.push_back(gpipe(microbatches)); break;
      case PipelineScheduleKind::one_f_one_b: actions_.push_back(one_f_one_b(stages, microbatches, rank)); break;
      case PipelineScheduleKind::interleaved:
        actions_.push_back(interleaved(stages, microbatches, virtual_stages, rank));
        break;
    }
  }
}

const std::vector<PipelineAction>& PipelineSchedule::actions(int rank) const {
  WF_CHECK(rank >= 0 && rank < stages_, "pp rank {} out of range: the schedule has {} stages (0..{})", rank, stages_,
           stages_ - 1);
  return actions_[at(rank)];
}

double PipelineSchedule::ideal_bubble() const {
  const double chunks = kind_ == PipelineScheduleKind::interleaved ? virtual_stages_ : 1;
  return (stages_ - 1) / (chunks * microbatches_);
}

int PipelineSchedule::warmup(int rank) const {
  int forwards = 0;
  for (const PipelineAction& action : actions(rank)) {
    if (action.op == Op::backward) break;
    ++forwards;
  }
  return forwards;
}

int PipelineSchedule::peak_in_flight(int rank) const {
  int held = 0;
  int peak = 0;
  for (const PipelineAction& action : actions(rank)) {
    held += action.op == Op::forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

double PipelineTimeline::bubble_fraction() const {
  if (per_rank.empty() || makespan <= 0) return 0;
  double idle = 0;
  for (const std::vector<PipelineEvent>& events : per_rank) {
    double busy = 0;
    for (const PipelineEvent& event : events) busy += event.end - event.start;
    idle += 1 - busy / makespan;
  }
  return idle / static_cast<double>(per_rank.size());
}

PipelineTimeline simulate(int virtual_stages, const std::vector<std::vector<PipelineAction>>& order,
                          double forward_cost, double backward_cost) {
  WF_CHECK(forward_cost >= 0 && backward_cost >= 0, "simulate needs non-negative costs, got forward {} backward {}",
           forward_cost, backward_cost);
  const int p = static_cast<int>(order.size());
  const int v = virtual_stages;
  WF_CHECK(p >= 1 && v >= 1, "simulate needs at least 1 rank and 1 chunk per rank, got {} ranks, {} chunks", p, v);
  int m = 0;
  for (const std::vector<PipelineAction>& actions : order) {
    for (const PipelineAction& action : actions) {
      WF_CHECK(action.microbatch >= 0 && action.chunk >= 0 && action.chunk < v,
               "action {} names microbatch {} chunk {}: microbatches count from 0, chunks run 0..{}",
               to_string(action, 2), action.microbatch, action.chunk, v - 1);
      m = std::max(m, action.microbatch + 1);
    }
  }
  const int last_stage = p * v - 1;
  constexpr double kNotYet = -1;  // costs are non-negative, so no action ends before 0
  // End time of each (op, global stage, microbatch), kNotYet until it has run.
  std::vector<double> forward_end(at(p * v * m), kNotYet);
  std::vector<double> backward_end(at(p * v * m), kNotYet);
  auto slot = [m](int stage, int microbatch) { return at(stage * m + microbatch); };

  PipelineTimeline timeline;
  timeline.per_rank.resize(at(p));
  std::vector<std::size_t> next(at(p), 0);
  std::vector<double> free_at(at(p), 0.0);
  // Each pass runs every action whose input is ready; the start times do not depend on the
  // order of passes, since each rank runs in its own order and inputs end when they end.
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < p; ++rank) {
      const std::vector<PipelineAction>& actions = order[at(rank)];
      while (next[at(rank)] < actions.size()) {
        const PipelineAction& action = actions[next[at(rank)]];
        const int stage = action.chunk * p + rank;
        double ready = 0;
        if (action.op == Op::forward) {
          if (stage > 0) ready = forward_end[slot(stage - 1, action.microbatch)];
        } else {
          const double own_forward = forward_end[slot(stage, action.microbatch)];
          const double downstream = stage < last_stage ? backward_end[slot(stage + 1, action.microbatch)] : own_forward;
          ready = own_forward == kNotYet ? kNotYet : downstream;
        }
        if (ready == kNotYet) break;
        const double start = std::max(ready, free_at[at(rank)]);
        const double end = start + (action.op == Op::forward ? forward_cost : backward_cost);
        (action.op == Op::forward ? forward_end : backward_end)[slot(stage, action.microbatch)] = end;
        timeline.per_rank[at(rank)].push_back({action, start, end});
        free_at[at(rank)] = end;
        timeline.makespan = std::max(timeline.makespan, end);
        ++next[at(rank)];
        progress = true;
      }
    }
  }

  std::vector<std::string> stuck;
  for (int rank = 0; rank < p; ++rank) {
    const std::vector<PipelineAction>& actions = order[at(rank)];
    if (next[at(rank)] < actions.size()) {
      stuck.push_back(fmt::format("rank {} at {}", rank, to_string(actions[next[at(rank)]], v)));
    }
  }
  WF_CHECK(stuck.empty(),
           "pipeline order over pp {} with pp_virtual {} deadlocks: these ranks wait forever at their next action: {}",
           p, v, fmt::join(stuck, ", "));
  return timeline;
}

PipelineTimeline simulate(const PipelineSchedule& schedule, double forward_cost, double backward_cost) {
  std::vector<std::vector<PipelineAction>> order;
  for (int rank = 0; rank < schedule.stages(); ++rank) order.push_back(schedule.actions(rank));
  return simulate(schedule.virtual_stages(), order, forward_cost, backward_cost);
}

}  // namespace wf::parallel
