// Allocation accounting: live and peak bytes per device, as benchmarks and the trainer report them.
#include <catch2/catch.hpp>

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
  REQUIRE_THROWS_WITH(wf::memory_stats(wf::Device::cuda(1)), Contains("cuda:1"));
}
