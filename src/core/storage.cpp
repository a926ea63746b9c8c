#include "wallfacer/core/storage.h"

#include <atomic>

#include "src/core/cpu_allocator.h"
#include "wallfacer/core/error.h"

namespace wf {
namespace {

struct Counters {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::int64_t> peak{0};
  std::atomic<std::int64_t> allocations{0};
};
Counters& cpu_counters() {
  static Counters counters;
  return counters;
}

void count_alloc(std::int64_t bytes) {
  auto& c = cpu_counters();
  const std::int64_t now = c.live.fetch_add(bytes) + bytes;
  std::int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations.fetch_add(1);
}

}  // namespace

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  WF_CHECK(device.is_cpu(), "cannot allocate {} bytes on {}: this build has no allocator for it", nbytes,
           device.str());
  if (nbytes > 0) {
    const detail::HostBlock block = detail::cpu_allocate(nbytes);
    data_ = block.data;
    capacity_ = block.size;
  }
  count_alloc(static_cast<std::int64_t>(nbytes_));
}

Storage::~Storage() {
  if (data_ != nullptr) detail::cpu_release({data_, capacity_});
  cpu_counters().live.fetch_sub(static_cast<std::int64_t>(nbytes_));
}

MemoryStats memory_stats(Device device) {
  WF_CHECK(device.is_cpu(), "memory_stats: no allocator for {}", device.str());
  auto& c = cpu_counters();
  const detail::CpuCacheStats cache = detail::cpu_cache_stats();
  return {c.live.load(), c.peak.load(), c.allocations.load(), cache.cached_bytes, cache.hits};
}

void reset_peak_memory(Device device) {
  WF_CHECK(device.is_cpu(), "reset_peak_memory: no allocator for {}", device.str());
  cpu_counters().peak.store(cpu_counters().live.load());
}

void empty_cache(Device device) {
  WF_CHECK(device.is_cpu(), "empty_cache: no allocator for {}", device.str());
  detail::cpu_empty_cache();
}

std::size_t memory_cache_limit(Device device) {
  WF_CHECK(device.is_cpu(), "memory_cache_limit: no allocator for {}", device.str());
  return detail::cpu_cache_limit();
}

void set_memory_cache_limit(std::size_t bytes, Device device) {
  WF_CHECK(device.is_cpu(), "set_memory_cache_limit: no allocator for {}", device.str());
  detail::set_cpu_cache_limit(bytes);
}

}  // namespace wf
