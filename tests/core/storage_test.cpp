// Allocation accounting: live and peak bytes per device, as benchmarks and the trainer report them.
#include <catch2/catch.hpp>

#include "wallfacer/build_info.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/core/tensor.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;

TEST_CASE("memory_stats counts live and peak bytes; views allocate nothing", "[core]") {
  const wf::MemoryStats before = wf::memory_stats();
  wf::reset_peak_memory();
  CHECK(wf::memory_stats().peak_bytes == before.live_bytes);
  {
    const Tensor a = Tensor::empty({1000}, DType::f32);  // 4000 bytes
    wf::MemoryStats now = wf::memory_stats();
    CHECK(now.live_bytes == before.live_bytes + 4000);
    CHECK(now.allocations == before.allocations + 1);

    const Tensor view = a.view({10, 100}), rows = a.slice0(0, 10), detached = a.detach();
    now = wf::memory_stats();
    CHECK(now.live_bytes == before.live_bytes + 4000);
    CHECK(now.allocations == before.allocations + 1);
    {
      const Tensor b = Tensor::empty({500}, DType::f64);  // another 4000
      CHECK(wf::memory_stats().live_bytes == before.live_bytes + 8000);
    }
    CHECK(wf::memory_stats().live_bytes == before.live_bytes + 4000);
  }
  const wf::MemoryStats after = wf::memory_stats();
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.peak_bytes == before.live_bytes + 8000);
  CHECK(after.allocations == before.allocations + 2);
  wf::reset_peak_memory();
  CHECK(wf::memory_stats().peak_bytes == after.live_bytes);
}

TEST_CASE("storage keeps its memory alive while any view holds it", "[core]") {
  const std::int64_t live_before = wf::memory_stats().live_bytes;
  Tensor row;
  {
    const Tensor base = Tensor::arange(0, 8).view({4, 2});
    row = base.slice0(3, 4);
  }
  CHECK(wf::memory_stats().live_bytes == live_before + 32);  // the base is gone, its storage is not
  CHECK(row.at(1) == 7);
  row = Tensor();
  CHECK(wf::memory_stats().live_bytes == live_before);
}

TEST_CASE("memory_stats for a device without an allocator is an error", "[core]") {
#if WF_HAVE_CUDA
  // A CUDA build has an allocator for every device type; CUDA's counts start at 0 and reading
  // them touches no GPU (so this runs without one).
  CHECK_NOTHROW(wf::memory_stats(wf::Device::cuda(1)));
#else
  REQUIRE_THROWS_WITH(wf::memory_stats(wf::Device::cuda(1)), Contains("cuda:1"));
#endif
}

namespace {
// Sets the cache limit for one test and restores the process's limit afterwards.
struct CacheLimit {
  explicit CacheLimit(std::size_t bytes) : saved(wf::memory_cache_limit()) { wf::set_memory_cache_limit(bytes); }
  ~CacheLimit() { wf::set_memory_cache_limit(saved); }
  std::size_t saved;
};
constexpr std::int64_t kMiB = std::int64_t{1} << 20;
}  // namespace

TEST_CASE("a freed large block is reused for the next request of about its size", "[core]") {
  const CacheLimit limit(std::size_t{64} << 20);
  wf::empty_cache();
  const void* first = nullptr;
  {
    const Tensor a = Tensor::empty({kMiB / 4}, DType::f32);  // 1 MiB
    first = a.data<float>();
    CHECK(reinterpret_cast<std::uintptr_t>(first) % 64 == 0);
  }
  const wf::MemoryStats freed = wf::memory_stats();
  CHECK(freed.cached_bytes == kMiB);
  {
    // 1 MiB minus one cache line fits the same block (waste <= 1/8): a hit, the same memory.
    const Tensor b = Tensor::empty({kMiB / 4 - 16}, DType::f32);
    CHECK(b.data<float>() == first);
    const wf::MemoryStats now = wf::memory_stats();
    CHECK(now.cache_hits == freed.cache_hits + 1);
    CHECK(now.cached_bytes == 0);
    CHECK(now.live_bytes == freed.live_bytes + (kMiB - 64));  // live bytes count what was asked for
  }
  {
    // Half the size would waste half the block: a fresh allocation, the cached block stays.
    const Tensor c = Tensor::empty({kMiB / 8}, DType::f32);
    CHECK(wf::memory_stats().cache_hits == freed.cache_hits + 1);
    CHECK(wf::memory_stats().cached_bytes == kMiB);
  }
  CHECK(wf::memory_stats().cached_bytes == kMiB + kMiB / 2);
  wf::empty_cache();
  CHECK(wf::memory_stats().cached_bytes == 0);
}

TEST_CASE("the cache never holds more than its limit, and limit 0 turns it off", "[core]") {
  const CacheLimit limit(std::size_t{3} << 20);
  wf::empty_cache();
  {
    const Tensor a = Tensor::empty({kMiB / 4}, DType::f32), b = Tensor::empty({kMiB / 2}, DType::f32);
    const Tensor c = Tensor::empty({kMiB / 2}, DType::f32);  // 1 + 2 + 2 MiB
  }
  // Releasing c then b then a: b would push the cache to 4 MiB, so the largest (c) is released.
  CHECK(wf::memory_stats().cached_bytes <= std::int64_t{3} << 20);
  CHECK(wf::memory_stats().cached_bytes == 3 * kMiB);
  wf::set_memory_cache_limit(0);
  CHECK(wf::memory_stats().cached_bytes == 0);
  { const Tensor d = Tensor::empty({kMiB / 4}, DType::f32); }
  CHECK(wf::memory_stats().cached_bytes == 0);
}

TEST_CASE("small tensors bypass the cache", "[core]") {
  const CacheLimit limit(std::size_t{64} << 20);
  wf::empty_cache();
  { const Tensor small = Tensor::empty({1000}, DType::f32); }
  CHECK(wf::memory_stats().cached_bytes == 0);
}
