#pragma once
// Streams and events: the order in which a device runs work, and the points at which another
// stream or the host waits for it (docs/devices.md).
//
// A Stream is a cheap value: a device and the backend's handle for one of its queues (0 is the
// device's default stream). Work queued on one stream runs in order; two streams are unordered
// unless one waits for an Event recorded on the other. The CPU and the test device run their
// work inline, as it is queued, so their streams are always idle and their events complete; a
// CUDA backend maps these onto cudaStream_t and cudaEvent_t with the same meaning.
//
// Every wait of the host for a device (Stream::synchronize, Event::synchronize,
// synchronize(Device), a copy from a device to the host) and every Tensor::item() counts one host
// synchronisation in a process-wide counter, host_sync_count(): a training step should wait for
// the device once per logged step, and tests assert that it does.
#include <cstdint>
#include <memory>

#include "wallfacer/core/device.h"

namespace wf {

class Event;

class Stream {
 public:
  Stream() = default;  // the CPU's default stream
  Stream(Device device, std::uint64_t handle) : device_(device), handle_(handle) {}

  static Stream default_for(Device device) { return Stream(device, 0); }
  // A stream of its own from the device's backend (a pool that lives as long as the process).
  static Stream create(Device device);
  // The stream this thread queues work for `device` on: the default stream unless a StreamGuard
  // says otherwise.
  static Stream current(Device device);

  Device device() const { return device_; }
  std::uint64_t handle() const { return handle_; }

  // The host waits until the work queued on this stream has run (one host synchronisation).
  void synchronize() const;
  // True when the work queued on this stream has run; never waits.
  bool query() const;
  // Work queued on this stream from now on waits until `event` has completed; the host does not
  // wait. A never-recorded event is complete.
  void wait(const Event& event) const;

  friend bool operator==(const Stream&, const Stream&) = default;

 private:
  Device device_;
  std::uint64_t handle_ = 0;
};

// A point in a stream's work. Copies share the same event.
class Event {
 public:
  Event() = default;  // not recorded: complete, and waiting for it returns at once

  // Marks the work queued on `stream` so far; a later record moves the mark.
  void record(const Stream& stream);
  bool recorded() const { return recorded_; }
  Device device() const { return device_; }
  // True when the recorded work has run (or nothing was recorded); never waits.
  bool query() const;
  // The host waits until the recorded work has run (one host synchronisation).
  void synchronize() const;

  // The backend's event object (null for backends that run inline).
  void* handle() const { return handle_.get(); }
  const std::shared_ptr<void>& shared_handle() const { return handle_; }

 private:
  Device device_;
  bool recorded_ = false;
  std::shared_ptr<void> handle_;
};

// Makes `stream` the current stream of its device on this thread for the guard's lifetime.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// The host waits until all work queued on the device's streams has run (one host synchronisation).
void synchronize(Device device);

// Host synchronisations so far in this process (see the comment at the top).
std::int64_t host_sync_count();
// The part of host_sync_count() made to stage device tensors through host memory for a transport
// that carries host memory only (MPI: comm/mpi_backend.cpp). A transport of the device's own
// (NCCL on GPUs) makes none, so a step's own host reads are host_sync_count() minus these.
std::int64_t staging_sync_count();

namespace detail {
void count_host_sync();
// While one exists on this thread, the host synchronisations it sees count as staging too.
class StagingScope {
 public:
  StagingScope();
  ~StagingScope();
  StagingScope(const StagingScope&) = delete;
  StagingScope& operator=(const StagingScope&) = delete;
};
}  // namespace detail

}  // namespace wf
