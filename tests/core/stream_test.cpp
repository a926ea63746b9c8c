// Streams, events and the host-synchronisation counter (wallfacer/core/stream.h). The CPU and the
// test device run work inline, so these check the interface's bookkeeping: which stream is current,
// what an event records, and which calls count as the host waiting for a device.
#include <catch2/catch.hpp>
#include <thread>

#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"

using Catch::Contains;
using wf::Device;
using wf::DType;
using wf::Event;
using wf::Stream;
using wf::Tensor;

namespace {
// Host synchronisations counted while fn runs.
template <class F>
std::int64_t host_syncs_during(F&& fn) {
  const std::int64_t before = wf::host_sync_count();
  fn();
  return wf::host_sync_count() - before;
}
}  // namespace

TEST_CASE("each device's current stream is its default until a StreamGuard sets another", "[core][stream]") {
  for (const Device device : {Device::cpu(), Device::test()}) {
    CAPTURE(device.str());
    const Stream default_stream = Stream::default_for(device);
    CHECK(default_stream.handle() == 0);
    CHECK(default_stream.device() == device);
    CHECK(Stream::current(device) == default_stream);

    const Stream a = Stream::create(device), b = Stream::create(device);
    CHECK(a.device() == device);
    CHECK(a != b);
    CHECK(a != default_stream);
    {
      const wf::StreamGuard outer(a);
      CHECK(Stream::current(device) == a);
      {
        const wf::StreamGuard inner(b);
        CHECK(Stream::current(device) == b);
      }
      CHECK(Stream::current(device) == a);
      // Another device's and another thread's current streams are their own.
      const Device other = device.is_cpu() ? Device::test() : Device::cpu();
      CHECK(Stream::current(other) == Stream::default_for(other));
      Stream seen_by_thread;
      std::thread([&] { seen_by_thread = Stream::current(device); }).join();
      CHECK(seen_by_thread == default_stream);
    }
    CHECK(Stream::current(device) == default_stream);
  }
  Stream cpu_default;
  CHECK(cpu_default == Stream::default_for(Device::cpu()));
}

TEST_CASE("an event records a point in a stream that another stream or the host waits for", "[core][stream]") {
  Event never;
  CHECK_FALSE(never.recorded());
  CHECK(never.query());
  CHECK(host_syncs_during([&] { never.synchronize(); }) == 0);  // nothing to wait for

  for (const Device device : {Device::cpu(), Device::test()}) {
    CAPTURE(device.str());
    const Stream producer = Stream::create(device), consumer = Stream::create(device);
    Event ready;
    ready.record(producer);
    CHECK(ready.recorded());
    CHECK(ready.device() == device);
    CHECK(ready.query());  // inline backends: the work is already done
    CHECK(producer.query());
    // A stream waiting for an event does not make the host wait.
    CHECK(host_syncs_during([&] { consumer.wait(ready); }) == 0);
    CHECK(host_syncs_during([&] { ready.synchronize(); }) == 1);
    // Copies share the event; re-recording moves it.
    const Event copy = ready;
    ready.record(consumer);
    CHECK(copy.recorded());
  }
  // Across device types: a CPU stream can wait for a test-device event.
  Event on_test;
  on_test.record(Stream::default_for(Device::test()));
  CHECK(host_syncs_during([&] { Stream().wait(on_test); }) == 0);  // already complete: no host wait
}

TEST_CASE("host synchronisations are counted where the host waits for a device or reads a value", "[core][stream]") {
  const Tensor cpu = Tensor::full({4}, 2.0);
  const Tensor one = Tensor::full({}, 3.0);
  // Waits for a device: one each.
  CHECK(host_syncs_during([] { Stream::default_for(Device::cpu()).synchronize(); }) == 1);
  CHECK(host_syncs_during([] { Stream::create(Device::test()).synchronize(); }) == 1);
  CHECK(host_syncs_during([] { wf::synchronize(Device::test()); }) == 1);
  CHECK(host_syncs_during([] { wf::synchronize(Device::cpu()); }) == 1);
  // item() is where a step reads a number back: it counts even on the CPU.
  double value = 0;
  CHECK(host_syncs_during([&] { value = one.item(); }) == 1);
  CHECK(value == 3.0);
  // Host work on host tensors does not.
  Tensor c = cpu.clone();
  CHECK(host_syncs_during([&] {
          c.fill_(1.0);
          c.copy_(cpu.to(DType::bf16));
          c = c.to(Device::cpu());
          value = cpu.at(0);
        }) == 0);
  CHECK(c.at(0) == 2.0);
  // To a device: queued, no wait. Work on a device: none. Back to the host: the host waits, once.
  Tensor dev;
  CHECK(host_syncs_during([&] { dev = cpu.to(Device::test()); }) == 0);
  CHECK(host_syncs_during([&] {
          dev.fill_(5.0);
          dev = dev.to(DType::f64);
        }) == 0);
  Tensor back;
  CHECK(host_syncs_during([&] { back = dev.to(Device::cpu()); }) == 1);
  CHECK(back.at(3) == 5.0);
}

TEST_CASE("streams of a device type without a backend are a clear error", "[core][stream]") {
  // Without a CUDA backend, or with one and no GPU (with a GPU, tests/cuda checks its streams).
  if (!wf::cuda_devices().empty()) return;
  REQUIRE_THROWS_WITH(Stream::create(Device::cuda(2)), Contains("cuda:2"));
  REQUIRE_THROWS_WITH(wf::synchronize(Device::cuda()), Contains("cuda:0"));
}
