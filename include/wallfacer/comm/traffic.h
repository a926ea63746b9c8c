#pragma once
// Traffic accounting: per group and per primitive, the messages and bytes this rank sent and
// received, counted at the primitive level with the conventions of
// shared/design/wallfacer-algorithm.md (for a group of size C):
//   all-gather of an output of S bytes:  sends and receives (C−1)/C·S
//   reduce-scatter of an input of S:     sends and receives (C−1)/C·S
//   all-reduce of S:                     sends and receives 2(C−1)/C·S
//   all-to-all of S:                     sends and receives (C−1)/C·S
//   broadcast of S:                      the root sends S, every other rank receives S
//   P2P (send, recv, isend, irecv, sendrecv): the message; zero when the peer is this rank.
// One message is counted per primitive call per direction with a non-zero volume.
// The sequence-parallel tests compare these numbers with the paper's formulas exactly.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace wf::comm {

enum class Primitive : int { send, recv, all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier, count };
const char* primitive_name(Primitive p);
// P2P primitives (send/recv) vs collectives: benchmarks report the two separately.
inline bool is_p2p(Primitive p) { return p == Primitive::send || p == Primitive::recv; }

struct Traffic {
  std::int64_t messages_sent = 0, bytes_sent = 0;
  std::int64_t messages_received = 0, bytes_received = 0;
  Traffic& operator+=(const Traffic& o) {
    messages_sent += o.messages_sent;
    bytes_sent += o.bytes_sent;
    messages_received += o.messages_received;
    bytes_received += o.bytes_received;
    return *this;
  }
  friend bool operator==(const Traffic&, const Traffic&) = default;
};

// Counters of one group. Thread-safe (a progress thread may complete requests).
class TrafficCounters {
 public:
  void record(Primitive p, std::int64_t bytes_sent, std::int64_t bytes_received);
  Traffic get(Primitive p) const;
  Traffic p2p() const;          // send + recv
  Traffic collectives() const;  // everything else
  Traffic total() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::array<Traffic, static_cast<int>(Primitive::count)> by_primitive_{};
};

// Every group's counters by group name, for one process. Groups register themselves.
class TrafficRegistry {
 public:
  static TrafficRegistry& instance();
  TrafficCounters& counters(std::string_view group);
  std::map<std::string, Traffic> snapshot(bool p2p_only = false, bool collectives_only = false) const;
  Traffic get(std::string_view group, Primitive p) const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, TrafficCounters, std::less<>> groups_;
};

}  // namespace wf::comm
