#include "wallfacer/train/batch_stager.h"

#include <cstring>

#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"

namespace wf::train {
namespace {
// Enough for a step's next batch and the ones whose copies are still in flight; more are made
// (and dropped) only while every kept one is busy.
constexpr std::size_t kMaxPinnedSlots = 8;
}  // namespace

BatchStager::BatchStager(Device device, std::int64_t microbatches)
    : device_(device), microbatches_(microbatches) {
  WF_CHECK(microbatches >= 1, "BatchStager: {} micro batches per step; expected at least 1", microbatches);
  if (!device_.is_cpu()) copy_stream_ = Stream::create(device_);
}

BatchStager::~BatchStager() {
  try {
    drop_prefetch();
  } catch (...) {
    // At exit, with the device runtime gone, there is nothing left to order.
  }
}

void BatchStager::drop_prefetch() {
  if (!next_) return;
  // Its tensors are freed in the compute stream's order, but the copy stream may still be writing
  // them: the compute stream waits for the copies first (no host wait).
  if (!device_.is_cpu()) Stream::current(device_).wait(next_->copied);
  next_.reset();
}

PinnedHostBuffer& BatchStager::pinned_for(std::size_t nbytes, std::size_t& slot) {
  for (std::size_t i = 0; i < pinned_.size(); ++i) {
    PinnedSlot& s = pinned_[i];
    if (s.buffer->nbytes() >= nbytes && s.done.query()) {
      slot = i;
      return *s.buffer;
    }
  }
  // Every kept buffer is too small or still being read: a new one, replacing the oldest idle one.
  if (pinned_.size() >= kMaxPinnedSlots) {
    for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
      if (it->done.query()) {
        pinned_.erase(it);
        break;
      }
    }
  }
  pinned_.push_back({std::make_unique<PinnedHostBuffer>(nbytes, device_), Event()});
  slot = pinned_.size() - 1;
  return *pinned_.back().buffer;
}

BatchStager::Staged BatchStager::stage(const models::BatchSource& source, std::int64_t step, std::int64_t micro) {
  Staged staged{&source, step, micro, {}, Event()};
  const models::Batch host = source.get(step, micro);
  if (device_.is_cpu()) {
    staged.batch = host;
    return staged;
  }
  DeviceBackend& backend = device_backend(device_);
  const Stream compute = Stream::current(device_);
  // The copies write tensors allocated in the compute stream's order: they wait for it first.
  Event allocated;
  staged.batch.set_documents(host.documents());  // host data: no copy to the device
  for (const std::string& name : host.names()) {
    const Tensor& t = host.at(name);
    WF_CHECK(t.device().is_cpu(), "BatchStager: batch tensor '{}' is on {}, expected the cpu", name, t.device().str());
    staged.batch.set(name, Tensor::empty(t.shape(), t.dtype(), device_));
  }
  allocated.record(compute);
  copy_stream_.wait(allocated);
  for (const std::string& name : host.names()) {
    const Tensor& t = host.at(name);
    Tensor dst = staged.batch.at(name);
    const std::size_t nbytes = t.nbytes();
    if (nbytes == 0) continue;
    std::size_t slot = 0;
    PinnedHostBuffer& pinned = pinned_for(nbytes, slot);
    std::memcpy(pinned.data(), t.raw_data(), nbytes);
    backend.copy_from_host(dst.raw_data(), pinned.data(), nbytes, copy_stream_);
    pinned_[slot].done.record(copy_stream_);
  }
  staged.copied.record(copy_stream_);
  return staged;
}

models::Batch BatchStager::get(const models::BatchSource& source, std::int64_t step, std::int64_t micro,
                               bool prefetch_next) {
  Staged current;
  if (next_ && next_->source == &source && next_->step == step && next_->micro == micro) {
    current = std::move(*next_);
    ++hits_;
  } else {
    drop_prefetch();  // a batch not asked for
    current = stage(source, step, micro);
    ++misses_;
  }
  next_.reset();
  if (!device_.is_cpu()) Stream::current(device_).wait(current.copied);
  if (prefetch_next && !device_.is_cpu()) {
    const bool last_micro = micro + 1 == microbatches_;
    next_ = stage(source, last_micro ? step + 1 : step, last_micro ? 0 : micro + 1);
  }
  return current.batch;
}

}  // namespace wf::train
