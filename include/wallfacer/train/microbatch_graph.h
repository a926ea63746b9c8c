#pragma once
// train.cuda_graph: a micro batch's forward and backward, captured once as a device graph and
// replayed for every later micro batch (wallfacer/core/graph.h has the rules a capture obeys;
// docs/devices.md, "Graphs", the design).
//
// The first micro batch runs eagerly, on the graph's stream: it makes every first-use choice
// (the attention kernels' per-shape measurement, the GEMM workspace of that stream) outside the
// capture, which could not hold their host waits. The second is captured, with its batch as the
// graph's inputs, then replayed; each later one is copied into those inputs and replayed. The
// gradients accumulate into the trainer's persistent gradient buffers, which the graph writes in
// place. A capture that fails (dropout's draws, a host read, a shape the first micro batch did not
// meet, batches that carry packed documents) is logged once with its reason, and every micro batch
// then runs eagerly; so does a batch whose tensors differ in shape from the graph's inputs.
#include <cstdint>
#include <functional>
#include <string>

#include "wallfacer/core/device.h"
#include "wallfacer/core/graph.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/models/model.h"

namespace wf::train {

class MicrobatchGraph {
 public:
  // The forward and backward of one micro batch, returning its loss (the sum and count).
  using Step = std::function<models::LossSum(const models::Batch&)>;

  explicit MicrobatchGraph(Device device);

  // Runs `step` on `batch` (eagerly, or by capturing or replaying the graph) in order after the
  // work queued on the device's current stream, which then waits for it. The loss returned is the
  // graph's output when it replayed: valid until the next run, which overwrites it.
  models::LossSum run(const models::Batch& batch, const Step& step);

  // Whether later micro batches replay a graph (false before the capture, and after a failed one).
  bool replaying() const { return !graph_.empty(); }
  // The reason the capture failed; empty when it did not.
  const std::string& failure() const { return failure_; }
  std::int64_t replays() const { return graph_.replays(); }
  std::int64_t eager_runs() const { return eager_runs_; }
  // Bytes the graph's memory pool holds (0 without a graph).
  std::size_t pool_bytes() const { return graph_.pool_bytes(); }

 private:
  // Whether `batch` has the graph inputs' tensors (names, shapes, dtypes) and no documents.
  bool fits_inputs(const models::Batch& batch) const;
  models::LossSum run_eagerly(const models::Batch& batch, const Step& step);

  Device device_;
  Stream stream_;  // where every micro batch runs, eager or replayed
  DeviceGraph graph_;
  models::Batch inputs_;    // the capture's batch: each replay's batch is copied into it
  models::LossSum outputs_;  // the capture's loss: each replay rewrites it
  std::int64_t eager_runs_ = 0;
  std::string failure_;
  bool warned_shape_ = false;
};

}  // namespace wf::train
