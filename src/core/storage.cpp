#include "wallfacer/core/storage.h"

#include <array>
#include <atomic>
#include <optional>

#include "src/core/cpu_allocator.h"
#include "src/core/graph_capture.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/error.h"

namespace wf {
namespace {

struct Counters {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::int64_t> peak{0};
  std::atomic<std::int64_t> allocations{0};
};
// Per device type (all indices of a type together).
Counters& counters(DeviceType type) {
  static std::array<Counters, kDeviceTypeCount> counters;
  return counters[static_cast<int>(type)];
}

void count_alloc(DeviceType type, std::int64_t bytes) {
  auto& c = counters(type);
  const std::int64_t now = c.live.fetch_add(bytes) + bytes;
  std::int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations.fetch_add(1);
}

}  // namespace

// The CPU's allocator is called directly rather than through its backend (which wraps the same
// functions): tensors are created and freed in every op, and the registry look-up and virtual
// call would add ~60 instructions to each pair (measured with callgrind).
Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  MemoryBlock block;
  if (device.is_cpu()) [[likely]] {
    if (nbytes > 0) {
      const detail::HostBlock host = detail::cpu_allocate(nbytes);
      block = {host.data, host.size};
    }
  } else {
    DeviceBackend& backend = device_backend(device);  // wf::Error naming the device when there is none
    if (nbytes > 0) {
      // While this thread captures a graph on the device, its memory comes from the graph's pool.
      const std::optional<MemoryBlock> captured = detail::capture_allocate(device, nbytes);
      block = captured ? *captured : backend.allocate(device, nbytes);
    }
  }
  data_ = block.data;
  capacity_ = block.size;
  count_alloc(device.type, static_cast<std::int64_t>(nbytes_));
}

Storage::Storage(std::size_t nbytes, Pinned pinned) : nbytes_(nbytes), device_(Device::cpu()), pinned_for_(pinned.pinned_for) {
  if (pinned_for_.is_cpu()) {  // the CPU's host memory is what it copies from fastest already
    const detail::HostBlock host = nbytes > 0 ? detail::cpu_allocate(nbytes) : detail::HostBlock{};
    data_ = host.data;
    capacity_ = host.size;
  } else if (nbytes > 0) {
    const MemoryBlock block = device_backend(pinned_for_).allocate_pinned(nbytes);
    data_ = block.data;
    capacity_ = block.size;
  }
  count_alloc(DeviceType::cpu, static_cast<std::int64_t>(nbytes_));
}

Storage::~Storage() {
  if (data_ != nullptr && !pinned_for_.is_cpu()) {
    find_device_backend(pinned_for_.type)->release_pinned({data_, capacity_});
  } else if (data_ != nullptr) {
    if (device_.is_cpu()) [[likely]] {
      detail::cpu_release({data_, capacity_});
    } else if (!detail::capture_release(device_, {data_, capacity_})) {
      find_device_backend(device_.type)->release(device_, {data_, capacity_});
    }
  }
  counters(device_.type).live.fetch_sub(static_cast<std::int64_t>(nbytes_));
}

MemoryStats memory_stats(Device device) {
  const DeviceBackend::CacheStats cache = device_backend(device).cache_stats();
  auto& c = counters(device.type);
  return {c.live.load(), c.peak.load(), c.allocations.load(), cache.cached_bytes, cache.hits};
}

void reset_peak_memory(Device device) {
  device_backend(device);
  counters(device.type).peak.store(counters(device.type).live.load());
}

void empty_cache(Device device) { device_backend(device).empty_cache(); }

std::size_t memory_cache_limit(Device device) { return device_backend(device).cache_limit(); }

void set_memory_cache_limit(std::size_t bytes, Device device) { device_backend(device).set_cache_limit(bytes); }

}  // namespace wf
