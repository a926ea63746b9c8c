#pragma once
// The parts of a device's backend that core needs: its memory, the copies, fills and dtype
// conversions on its memory, its streams and events, and pinned host buffers for copies to and
// from it. One backend per DeviceType, found with device_backend(); Storage, Tensor::to, copy_,
// fill_ and Stream/Event go through it (docs/devices.md). The CPU's and the test device's are
// built in; a CUDA backend registers itself with register_device_backend().
//
// Pointers passed to a backend are its own device's memory unless the name says host. The
// functions taking a Stream queue their work on it (the CPU and the test device run it at once).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "wallfacer/core/device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/stream.h"

namespace wf {

struct MemoryBlock {
  void* data = nullptr;
  std::size_t size = 0;  // what the block really holds (>= the bytes asked for); passed back on release
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // ---- memory -----------------------------------------------------------------------------
  // A block of at least nbytes (> 0), aligned for any dtype's vector loads; wf::Error when the
  // device is out of memory.
  virtual MemoryBlock allocate(Device device, std::size_t nbytes) = 0;
  virtual void release(Device device, MemoryBlock block) = 0;
  // The allocator's cache of freed blocks (see wf::memory_stats); a backend without one keeps
  // the defaults: nothing cached, limit 0.
  struct CacheStats {
    std::int64_t cached_bytes = 0;  // freed blocks held for reuse
    std::int64_t hits = 0;          // allocations served from them since the start
  };
  virtual CacheStats cache_stats() { return {}; }
  virtual void empty_cache() {}
  virtual std::size_t cache_limit() { return 0; }
  virtual void set_cache_limit(std::size_t bytes);

  // Host memory the device copies from and to fastest (page-locked for CUDA; plain host memory
  // for the CPU and the test device).
  virtual MemoryBlock allocate_pinned(std::size_t nbytes) = 0;
  virtual void release_pinned(MemoryBlock block) = 0;

  // ---- data movement, queued on `stream` (a stream of this backend's device) -------------------
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, const Stream& stream) = 0;
  // The host may read host_dst once the stream has run the copy (Stream::synchronize).
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, const Stream& stream) = 0;
  // n elements converted from src_dtype to dst_dtype (a plain copy when they are equal) with the
  // rounding Tensor::copy_ documents; src and dst do not overlap.
  virtual void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n,
                       const Stream& stream) = 0;
  virtual void fill(void* dst, DType dtype, std::int64_t n, double value, const Stream& stream) = 0;

  // ---- streams and events (see wallfacer/core/stream.h) -----------------------------------------
  virtual Stream create_stream(Device device) = 0;
  virtual void synchronize(const Stream& stream) = 0;
  virtual bool query(const Stream& stream) = 0;
  virtual void synchronize_device(Device device) = 0;
  // The backend's event object for Event::handle() (may be null), created on an event's first record.
  virtual std::shared_ptr<void> create_event(Device device) = 0;
  // Shared, so that queued work can keep the event alive.
  virtual void record(const std::shared_ptr<void>& event, const Stream& stream) = 0;
  virtual void wait(const Stream& stream, const std::shared_ptr<void>& event) = 0;
  virtual void synchronize_event(void* event) = 0;
  virtual bool query_event(void* event) = 0;

  // ---- graphs (wallfacer/core/graph.h); a backend without them keeps these defaults ------------
  virtual bool supports_graphs() { return false; }
  // From here on, what is queued on `stream` is recorded, not run (the default refuses).
  virtual void begin_capture(const Stream& stream);
  // Ends the capture and returns the executable graph: a handle replay() takes.
  virtual std::shared_ptr<void> end_capture(const Stream& stream);
  // Ends a capture that failed, keeping nothing of it.
  virtual void abort_capture(const Stream&) noexcept {}
  // Queues the graph's work on `stream`.
  virtual void replay(const std::shared_ptr<void>& graph, const Stream& stream);
  // Memory for a graph's pool (graph.cpp): outside the allocator's stream-ordered cache, since a
  // graph's replays use it on their own stream for as long as the graph lives. Allocation must
  // not be recorded by a capture in progress. release_graph_memory runs once no replay is queued.
  virtual MemoryBlock allocate_graph_memory(Device device, std::size_t nbytes) { return allocate(device, nbytes); }
  virtual void release_graph_memory(Device device, MemoryBlock block) { release(device, block); }
};

// The backend of device.type: wf::Error naming the device when this build has none.
DeviceBackend& device_backend(Device device);
// Null when this build has no backend for `type`.
DeviceBackend* find_device_backend(DeviceType type);
// Installs the backend of `type` for the rest of the process (it must outlive every storage it
// allocates); wf::Error when `type` already has one.
void register_device_backend(DeviceType type, DeviceBackend* backend);

// Host memory from a device's pinned allocator, for staging copies to and from it.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer(std::size_t nbytes, Device device);
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  void* data() { return block_.data; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  MemoryBlock block_;
  std::size_t nbytes_ = 0;
  Device device_;
};

}  // namespace wf
