#pragma once
// Batches on their way to the device the step runs on (train.device): each tensor is copied into
// pinned host memory and from there to the device on a copy stream of its own, and the next
// micro batch's copy is queued while the current one computes, so the transfer overlaps the step
// instead of preceding it. The compute stream waits for a batch's copy (an Event, not the host)
// when the batch is handed out. On the CPU the batch is used where it is, with no copy.
//
// Stream order (docs/devices.md): a staged tensor is allocated in the compute stream's order, so
// the copy stream first waits for the compute stream's work queued before the allocation; the
// pinned buffer a copy reads from is reused only once that copy's event has completed (asked with
// Event::query, which never waits).
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "wallfacer/core/device.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/models/batch_source.h"
#include "wallfacer/models/model.h"

namespace wf::train {

class BatchStager {
 public:
  // `microbatches` per step: the batch after (step, micro) is (step, micro + 1), or (step + 1, 0).
  BatchStager(Device device, std::int64_t microbatches);
  ~BatchStager();
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  // source.get(step, micro) on the device, ready for the compute stream (its current stream for
  // the device); queues the copy of the batch after it when `prefetch_next`.
  models::Batch get(const models::BatchSource& source, std::int64_t step, std::int64_t micro,
                    bool prefetch_next = true);

  Device device() const { return device_; }
  // Batches served from a prefetch, and copied when asked for (tests and metrics).
  std::int64_t prefetch_hits() const { return hits_; }
  std::int64_t direct_copies() const { return misses_; }

 private:
  struct Staged {
    const models::BatchSource* source = nullptr;
    std::int64_t step = 0, micro = 0;
    models::Batch batch;
    Event copied;  // on the copy stream, after the batch's last copy
  };
  struct PinnedSlot {
    std::unique_ptr<PinnedHostBuffer> buffer;
    Event done;  // the copy that last read this buffer
  };

  Staged stage(const models::BatchSource& source, std::int64_t step, std::int64_t micro);
  // A pinned buffer of at least nbytes whose last copy has completed (a new one when none has).
  PinnedHostBuffer& pinned_for(std::size_t nbytes, std::size_t& slot);
  // Drops the prefetched batch, once the compute stream is ordered after its copies.
  void drop_prefetch();

  Device device_;
  std::int64_t microbatches_;
  Stream copy_stream_;
  std::optional<Staged> next_;
  std::deque<PinnedSlot> pinned_;
  std::int64_t hits_ = 0, misses_ = 0;
};

}  // namespace wf::train
