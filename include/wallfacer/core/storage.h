#pragma once
// A block of device memory shared by a tensor and its views. Allocations are counted so that
// benchmarks and the trainer can report live and peak memory per rank. The memory comes from the
// backend of the device (wallfacer/core/device_backend.h). The CPU's is a caching allocator
// (src/core/cpu_allocator.h): freed large blocks are kept and reused, so a training step does not
// page-fault its tensors in again every step.
#include <cstddef>
#include <cstdint>

#include "wallfacer/core/device.h"

namespace wf {

class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  // Host memory (a CPU storage) from `pinned_for`'s pinned allocator: the device copies to and
  // from it directly (DeviceBackend::allocate_pinned). Counted as CPU memory.
  struct Pinned {
    Device pinned_for;
  };
  Storage(std::size_t nbytes, Pinned pinned);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::size_t capacity_ = 0;  // bytes of the block behind data_ (>= nbytes_)
  Device device_;
  Device pinned_for_;  // the device whose pinned allocator made this host block; cpu when none
};

// Per device type: the counts of cuda:0 and cuda:1 are one count. wf::Error for a device type
// this build has no backend for.
struct MemoryStats {
  std::int64_t live_bytes = 0;    // bytes held by storages now
  std::int64_t peak_bytes = 0;    // the most held at once since the last reset
  std::int64_t allocations = 0;   // storages created
  std::int64_t cached_bytes = 0;  // freed blocks the allocator keeps for reuse (not in live_bytes)
  std::int64_t cache_hits = 0;    // allocations served from those blocks
};
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory(Device device = Device::cpu());

// Returns the allocator's cached blocks to the system (live tensors are untouched).
void empty_cache(Device device = Device::cpu());
// The most bytes the allocator may keep cached; 0 turns caching off. The CPU's default is half the
// machine's memory, or WF_CPU_CACHE_MB; address-sanitizer builds default to 0. The test device
// keeps no cache (its limit is 0 and can only be set to 0).
std::size_t memory_cache_limit(Device device = Device::cpu());
void set_memory_cache_limit(std::size_t bytes, Device device = Device::cpu());

}  // namespace wf
