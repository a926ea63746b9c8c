#include "wallfacer/train/pipeline_runner.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"

namespace wf::train {
namespace {

using Clock = std::chrono::steady_clock;
using Op = parallel::PipelineAction::Op;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// What one (microbatch, chunk) keeps between its forward and its backward.
struct InFlight {
  Tensor input;   // the received hidden states (a leaf), undefined on the first global stage
  Tensor output;  // the hidden states sent on, or on the last global stage the loss sum
};

// A message posted but not yet waited for, with the tensor it fills or reads.
struct Pending {
  comm::Request request;
  Tensor tensor;
};

// Waits for a neighbour's message without holding a core: a stage waits for a whole forward or
// backward of its neighbour (the bubble), and a busy wait (Request::wait spins first) would take
// the core from the ranks and progress threads that share the machine, slowing the very stage it
// waits for. Polls with short sleeps (each test moves the transfer on), then, past a second,
// hands over to Request::wait, whose watchdog ends a job whose neighbour died.
// On a device's own transport the compute stream waits instead, on the device (no host wait).
void wait_idle(comm::Request& request, Device device) {
  if (request.completes_on_device()) {
    request.make_wait(Stream::current(device));
    return;
  }
  const Clock::time_point start = Clock::now();
  while (!request.test()) {
    if (Clock::now() - start > std::chrono::seconds(1)) {
      request.wait();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  request.wait();  // completes the request's bookkeeping (returns at once)
}

}  // namespace

PipelineRunner::PipelineRunner(models::Model& model, comm::Group& pp, parallel::PipelineSchedule schedule,
                               Device device, PipelineLinks links)
    : model_(model), pp_(pp), links_(links), schedule_(std::move(schedule)), device_(device) {
  for (const comm::Group* l : {links.send_activations, links.receive_activations, links.send_gradients,
                               links.receive_gradients}) {
    WF_CHECK(l == nullptr || l->size() == 2, "PipelineRunner: a link must be a pipeline edge of two ranks; '{}' has {}",
             l->name(), l->size());
  }
  WF_CHECK(pp_.size() == schedule_.stages(), "PipelineRunner: the schedule has {} stages but the pp group '{}' {} ranks",
           schedule_.stages(), pp_.name(), pp_.size());
  WF_CHECK(model_.stage().num_chunks() == schedule_.virtual_stages(),
           "PipelineRunner: model '{}' holds {} model chunks on this rank but the schedule runs {}", model_.name(),
           model_.stage().num_chunks(), schedule_.virtual_stages());
}

PipelineLinks PipelineLinks::of(comm::CommGrid& grid) {
  using comm::PipelineLink;
  return {&grid.pipeline_link(PipelineLink::activations, true), &grid.pipeline_link(PipelineLink::activations, false),
          &grid.pipeline_link(PipelineLink::gradients, true), &grid.pipeline_link(PipelineLink::gradients, false)};
}

PipelineRunner::Route PipelineRunner::route(bool forward, bool sending, int pp_peer) const {
  comm::Group* edge = forward ? (sending ? links_.send_activations : links_.receive_activations)
                              : (sending ? links_.send_gradients : links_.receive_gradients);
  if (edge == nullptr) return {pp_, pp_peer};
  WF_CHECK(edge->world_ranks()[sending ? 1 : 0] == pp_.world_ranks()[static_cast<std::size_t>(pp_peer)],
           "PipelineRunner: a message {} stage {} does not travel on the edge '{}' of world ranks [{}]",
           sending ? "to" : "from", pp_peer, edge->name(), fmt::join(edge->world_ranks(), ", "));
  return {*edge, sending ? 1 : 0};
}

bool PipelineRunner::last_stage(int chunk) const {
  return global_stage(chunk) == schedule_.stages() * schedule_.virtual_stages() - 1;
}

PipelineRunner::Peer PipelineRunner::previous(int chunk) const {
  if (first_stage(chunk)) return {};
  const int p = schedule_.stages(), r = pp_.rank();
  return r > 0 ? Peer{r - 1, chunk} : Peer{p - 1, chunk - 1};
}

PipelineRunner::Peer PipelineRunner::next(int chunk) const {
  if (last_stage(chunk)) return {};
  const int p = schedule_.stages(), r = pp_.rank();
  return r + 1 < p ? Peer{r + 1, chunk} : Peer{0, chunk + 1};
}

int PipelineRunner::tag(bool forward, int microbatch, int chunk) const {
  // Unique per direction, microbatch and receiving chunk between two neighbours.
  return 2 * (microbatch * schedule_.virtual_stages() + chunk) + (forward ? 0 : 1);
}

DeviceLossTotals PipelineRunner::train_step(const std::function<models::Batch(int)>& batch_of,
                                      const PipelineBackwardHooks& hooks) {
  const std::vector<parallel::PipelineAction>& actions = schedule_.actions(pp_.rank());
  std::size_t last_backward = 0;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].op == Op::backward) last_backward = i;
  }
  std::map<int, models::Batch> batches;           // by microbatch, loaded at its first forward
  std::map<std::pair<int, int>, InFlight> live;  // by (microbatch, chunk)
  std::map<std::pair<int, int>, Pending> receives;  // by (microbatch, chunk), forward and backward alike
  std::vector<Pending> sends;
  DeviceLossTotals totals(device_);
  timeline_.clear();
  wait_seconds_ = 0;
  const Clock::time_point step_start = Clock::now();

  const auto batch = [&](int mb) -> const models::Batch& {
    auto it = batches.find(mb);
    if (it == batches.end()) it = batches.emplace(mb, batch_of(mb)).first;
    return it->second;
  };
  // Posts the receive action i needs, if any and not yet posted.
  const auto post_receive = [&](std::size_t i) {
    if (i >= actions.size()) return;
    const parallel::PipelineAction& a = actions[i];
    const bool forward = a.op == Op::forward;
    const Peer from = forward ? previous(a.chunk) : next(a.chunk);
    if (from.rank < 0 || receives.count({a.microbatch, a.chunk}) != 0) return;
    const auto [shape, dtype] = model_.stage_hidden(batch(a.microbatch));
    Pending pending{comm::Request(), Tensor::empty(shape, dtype, device_)};
    const Route r = route(forward, /*sending=*/false, from.rank);
    pending.request = r.group.irecv(pending.tensor, r.peer, tag(forward, a.microbatch, a.chunk));
    receives.emplace(std::make_pair(a.microbatch, a.chunk), std::move(pending));
  };
  // Waits for the receive of (mb, chunk) and returns its tensor; the wait is bubble.
  const auto received = [&](int mb, int chunk, double& waited) {
    auto it = receives.find({mb, chunk});
    WF_CHECK(it != receives.end(), "PipelineRunner: no receive posted for microbatch {} chunk {}", mb, chunk);
    const Clock::time_point wait_start = Clock::now();
    wait_idle(it->second.request, device_);
    waited += seconds_between(wait_start, Clock::now());
    Tensor t = std::move(it->second.tensor);
    receives.erase(it);
    return t;
  };
  const auto send = [&](const Tensor& t, const Peer& to, bool forward, int mb) {
    Pending pending{comm::Request(), t};
    const Route r = route(forward, /*sending=*/true, to.rank);
    pending.request = r.group.isend(pending.tensor, r.peer, tag(forward, mb, to.chunk));
    sends.push_back(std::move(pending));
  };

  post_receive(0);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    post_receive(i + 1);  // overlaps the next action's transfer with this one
    const parallel::PipelineAction& a = actions[i];
    PipelineActionTiming timing{a, seconds_between(step_start, Clock::now()), 0, 0};
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (a.op == Op::forward) {
      InFlight state;
      if (!first_stage(a.chunk)) {
        state.input = received(a.microbatch, a.chunk, timing.wait);
        state.input.set_requires_grad(true);
      }
      models::StageOutput out = model_.forward_stage(batch(a.microbatch), state.input, a.chunk);
      if (last_stage(a.chunk)) {
        totals.add(out.loss.sum, out.loss.count);  // on the device: no host read per microbatch
        state.output = std::move(out.loss.sum);
      } else {
        state.output = std::move(out.hidden);
        send(state.output.detach(), next(a.chunk), /*forward=*/true, a.microbatch);
      }
      live.emplace(key, std::move(state));
    } else {
      auto it = live.find(key);
      WF_CHECK(it != live.end(), "PipelineRunner: backward of microbatch {} chunk {} before its forward", a.microbatch,
               a.chunk);
      InFlight state = std::move(it->second);
      live.erase(it);
      if (hooks.before) hooks.before(i == last_backward);
      if (last_stage(a.chunk)) {
        autograd::backward({state.output});  // the gradient of the loss SUM
      } else {
        const Tensor grad = received(a.microbatch, a.chunk, timing.wait);
        autograd::backward({state.output}, {grad});
      }
      if (hooks.after) hooks.after();
      if (!first_stage(a.chunk)) {
        Tensor grad = state.input.grad();
        // An input the chunk never read (no path to its output) has no gradient: zeros.
        if (!grad.defined()) grad = Tensor::zeros(state.input.shape(), state.input.dtype(), device_);
        send(grad, previous(a.chunk), /*forward=*/false, a.microbatch);
      }
    }
    timing.end = seconds_between(step_start, Clock::now());
    wait_seconds_ += timing.wait;
    timeline_.push_back(timing);
  }
  const Clock::time_point drain = Clock::now();
  for (Pending& s : sends) wait_idle(s.request, device_);
  wait_seconds_ += seconds_between(drain, Clock::now());
  WF_CHECK(live.empty() && receives.empty(), "PipelineRunner: the schedule left {} forwards without a backward and {} "
           "receives unused", live.size(), receives.size());
  step_seconds_ = seconds_between(step_start, Clock::now());
  return totals;
}

DeviceLossTotals PipelineRunner::forward_only(const std::function<models::Batch(int)>& batch_of, int microbatches) {
  autograd::NoGradGuard no_grad;
  DeviceLossTotals totals(device_);
  std::vector<Pending> sends;
  for (int mb = 0; mb < microbatches; ++mb) {
    const models::Batch batch = batch_of(mb);
    for (int chunk = 0; chunk < schedule_.virtual_stages(); ++chunk) {
      Tensor input;
      if (!first_stage(chunk)) {
        const auto [shape, dtype] = model_.stage_hidden(batch);
        input = Tensor::empty(shape, dtype, device_);
        const Route r = route(/*forward=*/true, /*sending=*/false, previous(chunk).rank);
        r.group.recv(input, r.peer, tag(true, mb, chunk));
      }
      models::StageOutput out = model_.forward_stage(batch, input, chunk);
      if (last_stage(chunk)) {
        totals.add(out.loss.sum, out.loss.count);
      } else {
        Pending pending{comm::Request(), out.hidden};
        const Route r = route(/*forward=*/true, /*sending=*/true, next(chunk).rank);
        pending.request = r.group.isend(pending.tensor, r.peer, tag(true, mb, next(chunk).chunk));
        sends.push_back(std::move(pending));
      }
    }
  }
  for (Pending& s : sends) wait_idle(s.request, device_);
  return totals;
}

double PipelineRunner::bubble() const {
  const double compute = step_seconds_ - wait_seconds_;
  return compute > 0 ? wait_seconds_ / compute : 0.0;
}

std::string PipelineRunner::timeline_json() const {
  nlohmann::ordered_json j;
  j["rank"] = pp_.rank();
  j["stages"] = schedule_.stages();
  j["microbatches"] = schedule_.microbatches();
  j["virtual"] = schedule_.virtual_stages();
  j["schedule"] = parallel::to_string(schedule_.kind());
  j["step_s"] = step_seconds_;
  j["wait_s"] = wait_seconds_;
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const PipelineActionTiming& t : timeline_) {
    events.push_back({{"op", t.action.op == Op::forward ? "F" : "B"},
                      {"mb", t.action.microbatch},
                      {"chunk", t.action.chunk},
                      {"start", t.start},
                      {"end", t.end},
                      {"wait", t.wait}});
  }
  j["events"] = std::move(events);
  return j.dump();
}

}  // namespace wf::train
