#include "wallfacer/comm/traffic.h"

namespace wf::comm {

const char* primitive_name(Primitive p) {
  switch (p) {
    case Primitive::send: return "send";
    case Primitive::recv: return "recv";
    case Primitive::all_reduce: return "all_reduce";
    case Primitive::all_gather: return "all_gather";
    case Primitive::reduce_scatter: return "reduce_scatter";
    case Primitive::all_to_all: return "all_to_all";
    case Primitive::broadcast: return "broadcast";
    case Primitive::barrier: return "barrier";
    case Primitive::count: break;
  }
  return "unknown";
}

void TrafficCounters::record(Primitive p, std::int64_t bytes_sent, std::int64_t bytes_received) {
  std::lock_guard lock(mutex_);
  Traffic& t = by_primitive_[static_cast<std::size_t>(p)];
  // A direction with nothing in it is no message (self-sends, groups of one, empty tensors).
  if (bytes_sent > 0) {
    t.messages_sent += 1;
    t.bytes_sent += bytes_sent;
  }
  if (bytes_received > 0) {
    t.messages_received += 1;
    t.bytes_received += bytes_received;
  }
}

Traffic TrafficCounters::get(Primitive p) const {
  std::lock_guard lock(mutex_);
  return by_primitive_[static_cast<std::size_t>(p)];
}

Traffic TrafficCounters::p2p() const {
  std::lock_guard lock(mutex_);
  Traffic sum;
  for (int p = 0; p < static_cast<int>(Primitive::count); ++p) {
    if (is_p2p(static_cast<Primitive>(p))) sum += by_primitive_[static_cast<std::size_t>(p)];
  }
  return sum;
}

Traffic TrafficCounters::collectives() const {
  std::lock_guard lock(mutex_);
  Traffic sum;
  for (int p = 0; p < static_cast<int>(Primitive::count); ++p) {
    if (!is_p2p(static_cast<Primitive>(p))) sum += by_primitive_[static_cast<std::size_t>(p)];
  }
  return sum;
}

Traffic TrafficCounters::total() const {
  std::lock_guard lock(mutex_);
  Traffic sum;
  for (const Traffic& t : by_primitive_) sum += t;
  return sum;
}

void TrafficCounters::reset() {
  std::lock_guard lock(mutex_);
  by_primitive_.fill(Traffic{});
}

TrafficRegistry& TrafficRegistry::instance() {
  static TrafficRegistry registry;
  return registry;
}

TrafficCounters& TrafficRegistry::counters(std::string_view group) {
  std::lock_guard lock(mutex_);
  auto it = groups_.find(group);
  // std::map never moves its nodes, so the reference stays valid while new groups register.
  if (it == groups_.end()) it = groups_.try_emplace(std::string(group)).first;
  return it->second;
}

std::map<std::string, Traffic> TrafficRegistry::snapshot(bool p2p_only, bool collectives_only) const {
  std::lock_guard lock(mutex_);
  std::map<std::string, Traffic> out;
  for (const auto& [name, counters] : groups_) {
    if (p2p_only && !collectives_only) out[name] = counters.p2p();
    else if (collectives_only && !p2p_only) out[name] = counters.collectives();
    else out[name] = counters.total();
  }
  return out;
}

Traffic TrafficRegistry::get(std::string_view group, Primitive p) const {
  std::lock_guard lock(mutex_);
  const auto it = groups_.find(group);
  return it == groups_.end() ? Traffic{} : it->second.get(p);
}

void TrafficRegistry::reset() {
  std::lock_guard lock(mutex_);
  for (auto& [name, counters] : groups_) counters.reset();
}

}  // namespace wf::comm
