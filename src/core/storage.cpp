#include "wallfacer/core/storage.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "wallfacer/core/error.h"

namespace wf {
namespace {

// 64-byte alignment: a cache line, and enough for any SIMD load the kernels use.
constexpr std::size_t kAlignment = 64;

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
  const std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded > 0) {
    data_ = std::aligned_alloc(kAlignment, rounded);
    WF_CHECK(data_ != nullptr, "out of memory allocating {} bytes on {}", nbytes, device.str());
  }
  count_alloc(static_cast<std::int64_t>(nbytes_));
}

Storage::~Storage() {
  std::free(data_);
  cpu_counters().live.fetch_sub(static_cast<std::int64_t>(nbytes_));
}

MemoryStats memory_stats(Device device) {
  WF_CHECK(device.is_cpu(), "memory_stats: no allocator for {}", device.str());
  auto& c = cpu_counters();
  return {c.live.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device device) {
  WF_CHECK(device.is_cpu(), "reset_peak_memory: no allocator for {}", device.str());
  cpu_counters().peak.store(cpu_counters().live.load());
}

}  // namespace wf
