#pragma once
// Pipeline-parallel schedules as data: for each pp rank, the ordered list of forward and
// backward passes (microbatch, model chunk) it runs in one optimizer step. The executor
// (train/pipeline_executor.h) only walks this table; GPipe, 1F1B and interleaved 1F1B differ in
// the table alone (Megatron's pipeline_parallel/schedules.py, written as a table instead of
// control flow). simulate() runs a table with fixed costs: the bubble a schedule implies, and a
// check that its order cannot deadlock.
#include <string>
#include <string_view>
#include <vector>

namespace wf::parallel {

enum class PipelineScheduleKind { gpipe, one_f_one_b, interleaved };

// "gpipe" | "1f1b" | "interleaved".
std::string to_string(PipelineScheduleKind kind);
// wf::UserError listing the valid names for anything else.
PipelineScheduleKind parse_pipeline_schedule(std::string_view name);

struct PipelineAction {
  enum class Op { forward, backward };
  Op op = Op::forward;
  int microbatch = 0;  // 0..m-1
  int chunk = 0;       // this rank's model chunk 0..v-1 (virtual stage); global stage = chunk * p + rank
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};
// "F3" / "B3" for one chunk per rank, "F3.1" (microbatch.chunk) for several.
std::string to_string(const PipelineAction& action, int virtual_stages = 1);
// The actions separated by single spaces, e.g. "F0 F1 B0 B1": how tests and logs show a rank.
std::string to_string(const std::vector<PipelineAction>& actions, int virtual_stages = 1);

// Why (kind, p stages, m microbatches, v virtual stages) cannot run, as messages naming the config
// keys (parallel.pp, parallel.pp_schedule, parallel.pp_virtual, and the microbatch count
// train.global_batch_size / (parallel.dp x train.micro_batch_size)); empty when it can.
std::vector<std::string> pipeline_schedule_problems(PipelineScheduleKind kind, int p, int m, int v);

class PipelineSchedule {
 public:
  // wf::UserError joining pipeline_schedule_problems when it cannot run.
  PipelineSchedule(PipelineScheduleKind kind, int stages, int microbatches, int virtual_stages = 1);

  PipelineScheduleKind kind() const { return kind_; }
  int stages() const { return stages_; }
  int microbatches() const { return microbatches_; }
  int virtual_stages() const { return virtual_stages_; }
  // The ordered actions of pp rank `rank` (0..p-1).
  const std::vector<PipelineAction>& actions(int rank) const;
  // The bubble of the textbook analysis, idle over compute time: (p-1)/m for gpipe and 1f1b,
  // (p-1)/(v*m) interleaved.
  double ideal_bubble() const;
  // The forwards rank `rank` runs before its first backward (its warm-up).
  int warmup(int rank) const;
  // The most (microbatch, chunk) activations rank `rank` holds at once (forwarded, not yet
  // backwarded).
  int peak_in_flight(int rank) const;

 private:
  PipelineScheduleKind kind_;
  int stages_, microbatches_, virtual_stages_;
  std::vector<std::vector<PipelineAction>> actions_;  // per rank
};

// A schedule run with fixed costs per action (forward f, backward b seconds per chunk, no P2P
// latency), each rank executing its actions strictly in order: a forward of global stage s > 0
// waits for the forward of stage s-1 of the same microbatch, a backward of stage s < last for
// the backward of stage s+1 (the last stage's backward for its own forward). Sends never
// block. wf::Error naming the stuck ranks and their next actions if the order deadlocks.
struct PipelineEvent {
  PipelineAction action;
  double start = 0, end = 0;
};
struct PipelineTimeline {
  std::vector<std::vector<PipelineEvent>> per_rank;
  double makespan = 0;
  // Idle time over the makespan, averaged over ranks: 1 - busy / makespan.
  double bubble_fraction() const;
};
PipelineTimeline simulate(const PipelineSchedule& schedule, double forward_cost, double backward_cost);
// The same for any per-rank order (order[rank], with v chunks per rank and microbatches counted
// from 0): how a hand-made or future schedule is checked for deadlocks before it runs.
PipelineTimeline simulate(int virtual_stages, const std::vector<std::vector<PipelineAction>>& order,
                          double forward_cost, double backward_cost);

}  // namespace wf::parallel
