#include "wallfacer/train/microbatch_graph.h"

#include "wallfacer/core/log.h"
#include "wallfacer/core/storage.h"

namespace wf::train {

MicrobatchGraph::MicrobatchGraph(Device device) : device_(device), stream_(Stream::create(device)) {}

bool MicrobatchGraph::fits_inputs(const models::Batch& batch) const {
  if (!batch.documents().empty() || batch.names() != inputs_.names()) return false;
  for (const std::string& name : batch.names()) {
    const Tensor& a = batch.at(name);
    const Tensor& b = inputs_.at(name);
    if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.device() != b.device()) return false;
  }
  return true;
}

models::LossSum MicrobatchGraph::run_eagerly(const models::Batch& batch, const Step& step) {
  eager_runs_ += 1;
  return step(batch);
}

models::LossSum MicrobatchGraph::run(const models::Batch& batch, const Step& step) {
  // The graph's stream runs after what the current stream queued (the batch's copy to the
  // device), and the current stream after it (the loss totals, the optimizer).
  const Stream caller = Stream::current(device_);
  Event ready;
  ready.record(caller);
  stream_.wait(ready);
  models::LossSum loss;
  {
    const StreamGuard guard(stream_);
    if (eager_runs_ == 0 || !failure_.empty()) {
      loss = run_eagerly(batch, step);
    } else if (graph_.empty()) {
      // The eager micro batch's blocks, cached by the allocator, go back to the device first: the
      // graph's pool takes memory of its own (once: a host wait on the allocator's stream).
      empty_cache(device_);
      try {
        if (!batch.documents().empty()) {
          // (validate refuses data.pack; a batch source of a model's own may still pack.)
          throw GraphCaptureError("the batches carry packed documents, whose boundaries are host data that "
                                  "change with every batch: a replay would keep the first batch's");
        }
        inputs_ = batch;  // the graph reads these tensors at every replay: kept as long as it is
        graph_ = DeviceGraph::capture(stream_, [&] { outputs_ = step(inputs_); });
        log::info("train.cuda_graph: captured a micro batch's forward and backward on {} ({:.1f} MiB of graph memory); "
                  "replaying it from here on",
                  device_.str(), static_cast<double>(graph_.pool_bytes()) / (1 << 20));
        graph_.replay();  // the capture ran nothing: its first replay computes this micro batch
        loss = outputs_;
      } catch (const GraphCaptureError& e) {
        failure_ = e.what();
        inputs_ = models::Batch();
        outputs_ = models::LossSum();
        log::warn("train.cuda_graph: the step could not be captured as a graph, so it runs without one: {}", failure_);
        loss = run_eagerly(batch, step);
      }
    } else if (fits_inputs(batch)) {
      for (const std::string& name : batch.names()) {
        Tensor input = inputs_.at(name);
        input.copy_(batch.at(name));
      }
      graph_.replay();
      loss = outputs_;
    } else {
      if (!warned_shape_) {
        log::warn("train.cuda_graph: a micro batch differs from the captured one (its tensors' shapes, or packed "
                  "documents); such batches run without the graph");
        warned_shape_ = true;
      }
      loss = run_eagerly(batch, step);
    }
  }
  Event done;
  done.record(stream_);
  caller.wait(done);
  return loss;
}

}  // namespace wf::train
