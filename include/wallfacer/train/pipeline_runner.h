#pragma once
// PipelineRunner: runs one pp rank's part of a pipeline schedule (parallel/pipeline_schedule.h)
// over its model stage, and moves the activations between stages.
//
// The schedule is the table; the runner only walks this rank's row of it:
//   forward  (mb, chunk): the first global stage embeds microbatch mb; any other receives the
//            previous stage's hidden states as a fresh leaf that requires grad, runs its blocks,
//            and sends its output on (non-blocking), or on the last stage keeps the loss sum.
//   backward (mb, chunk): the last stage back-propagates its loss sum; any other receives the
//            gradient of its output and back-propagates it; then sends its input leaf's
//            gradient back (non-blocking).
// Sends never block the schedule and every message has its own tag (direction, microbatch,
// chunk), so the only waits are for data a neighbour's earlier action produces: a schedule that
// simulate() runs without deadlock runs here without one. Each receive is posted one action
// ahead of the action that needs it, so the transfer overlaps the action before; the time spent
// waiting is the measured bubble. All traffic goes over the grid's "pp" group: counted, checked
// and under the watchdog like every other message.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/models/model.h"
#include "wallfacer/parallel/pipeline_schedule.h"
#include "wallfacer/train/loss_totals.h"

namespace wf::train {

// What the gradient reducer does around each backward (ReplicaGradients::begin_backward /
// end_backward); `last` is this rank's last backward of the step.
struct PipelineBackwardHooks {
  std::function<void(bool last)> before;
  std::function<void()> after;
};

// One action as it ran on this rank: when it started and ended (seconds since the step began)
// and how long of that it waited for a neighbour.
struct PipelineActionTiming {
  parallel::PipelineAction action;
  double start = 0, end = 0, wait = 0;
};

// The groups the stages' messages travel on, each a pipeline edge of two ranks, sender first
// (comm::CommGrid::pipeline_link): the activations this rank sends and receives, the gradients
// likewise. Null (the default): the pp group itself, peers by stage.
struct PipelineLinks {
  comm::Group* send_activations = nullptr;
  comm::Group* receive_activations = nullptr;
  comm::Group* send_gradients = nullptr;
  comm::Group* receive_gradients = nullptr;
  // Every edge of `grid` (pp > 1).
  static PipelineLinks of(comm::CommGrid& grid);
};

class PipelineRunner {
 public:
  // `pp` is the grid's pp group (group rank = stage); `model` holds this rank's stage (its
  // chunks: schedule.virtual_stages() of them) on `device`, where its loss totals stay.
  PipelineRunner(models::Model& model, comm::Group& pp, parallel::PipelineSchedule schedule,
                 Device device = Device::cpu(), PipelineLinks links = {});

  const parallel::PipelineSchedule& schedule() const { return schedule_; }

  // One training step's forwards and backwards: batch_of(mb) is microbatch mb's batch (called
  // once per microbatch). Returns this rank's loss totals, on the device (no host read): the last
  // stage's loss sums and counts, zero elsewhere. The parameters' gradients hold the gradient of
  // the loss SUM.
  DeviceLossTotals train_step(const std::function<models::Batch(int)>& batch_of, const PipelineBackwardHooks& hooks);
  // Forward only (validation, no graph): every microbatch through every chunk in order.
  DeviceLossTotals forward_only(const std::function<models::Batch(int)>& batch_of, int microbatches);

  // Of the latest train_step: each action's timing, in this rank's order, and the totals.
  const std::vector<PipelineActionTiming>& timeline() const { return timeline_; }
  double step_seconds() const { return step_seconds_; }
  double wait_seconds() const { return wait_seconds_; }
  // Waiting over computing (step time minus waits): the measured bubble of this rank.
  double bubble() const;
  // The latest step's timeline as JSON: {"rank": r, "stages": p, "microbatches": m, "virtual": v,
  // "step_s": t, "events": [{"op": "F", "mb": 0, "chunk": 0, "start": s, "end": e, "wait": w}, ...]}.
  std::string timeline_json() const;

 private:
  struct Peer {
    int rank = -1;   // pp group rank
    int chunk = 0;   // its chunk that sends or receives
  };
  // The global stage before / after chunk `chunk` of this rank; rank -1 at either end.
  Peer previous(int chunk) const;
  Peer next(int chunk) const;
  int global_stage(int chunk) const { return chunk * schedule_.stages() + pp_.rank(); }
  bool first_stage(int chunk) const { return global_stage(chunk) == 0; }
  bool last_stage(int chunk) const;
  // The tag of the message for (direction, microbatch, receiving chunk).
  int tag(bool forward, int microbatch, int chunk) const;

  models::Model& model_;
  comm::Group& pp_;
  PipelineLinks links_;
  // Where a message to or from the stage `pp_peer` goes: its edge and the peer there, or the pp
  // group and `pp_peer` without links.
  struct Route {
    comm::Group& group;
    int peer;
  };
  Route route(bool forward, bool sending, int pp_peer) const;
  parallel::PipelineSchedule schedule_;
  Device device_;
  std::vector<PipelineActionTiming> timeline_;
  double step_seconds_ = 0, wait_seconds_ = 0;
};

}  // namespace wf::train
