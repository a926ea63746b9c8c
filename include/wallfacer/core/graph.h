#pragma once
// Device graphs: the work a piece of code queues on one stream, recorded once and replayed
// (CUDA graphs; the test device emulates them, so the rules below are checked without a GPU).
// docs/devices.md, "Graphs", says why the training step uses one and what it may not do.
//
// What a replay repeats is exactly what capture recorded: the same kernels with the same
// arguments over the same memory. So, while capturing:
//   - nothing runs: the work runs at the first replay. So a tensor the work makes and keeps beyond
//     it (a cache filled on first use) holds nothing until then, and nothing ever if the capture
//     fails: run the work once without a graph first, as train::MicrobatchGraph does;
//   - every allocation on the stream's device comes from a pool of the graph's own, whose blocks
//     stay reserved as long as the graph (or a tensor allocated in it) lives, so replays never
//     write memory that has been handed to someone else; a block freed during capture is reused
//     by later allocations of the same capture (stream order makes that safe); a tensor made
//     before the capture and freed during it (an input the work read, then dropped) is kept by
//     the graph too, since its replays read it;
//   - host values are baked in: scalars passed to kernels, and the bytes of copies from host
//     memory (each replay copies what the host held at capture time). Inputs that change from
//     one replay to the next must be device tensors the caller copies into before replaying;
//   - the host may not wait for the device (a synchronize, a copy to the host, item()), nor may
//     the work draw random numbers from the process's generators (a replay would repeat them),
//     nor queue work on another stream of the device: each makes the capture fail with a
//     GraphCaptureError that names it, and the caller runs the work without a graph instead.
#include <functional>
#include <memory>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"

namespace wf {

// A capture that could not be completed; nothing of it ran and nothing of it is kept.
class GraphCaptureError : public Error {
 public:
  using Error::Error;
};

// Whether `device`'s backend records graphs (CUDA and the test device do; the CPU does not).
bool graphs_supported(Device device);

class DeviceGraph {
 public:
  DeviceGraph() = default;  // empty: replay() is an error

  // Runs `work` with `stream` as its device's current stream, recording what it queues there.
  // `stream` must be one of Stream::create's (not a device's default stream, which the
  // allocator orders its frees on). Throws GraphCaptureError for what a graph cannot hold
  // (the comment at the top), and anything `work` throws, after abandoning the capture.
  static DeviceGraph capture(const Stream& stream, const std::function<void()>& work);

  // Queues the recorded work on the capture stream again. The host does not wait.
  void replay() const;

  bool empty() const { return state_ == nullptr; }
  // Bytes of device memory the graph's pool holds (its reservation, live tensors included).
  std::size_t pool_bytes() const;
  // Replays so far.
  std::int64_t replays() const;

  struct State;  // graph.cpp

 private:
  std::shared_ptr<State> state_;
};

}  // namespace wf
