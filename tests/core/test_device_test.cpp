// The test device (src/core/test_device.h): its memory is reachable only through its own copies
// and kernels. Round trips, fills and dtype conversions on it match the CPU's bit for bit; a host
// read of its memory is refused or faults (checked in forked children, so the faults do not end
// this process). Ops on it are tests/ops/test_on_test_device.cpp's.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/core/test_device.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/build_info.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/ops.h"

using Catch::Contains;
using wf::Device;
using wf::DType;
using wf::Tensor;

namespace {

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};

// A CPU tensor of `dtype` whose bytes are random: every bit pattern, NaNs included.
Tensor random_bits(const wf::Shape& shape, DType dtype, unsigned seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.device().is_cpu() && b.device().is_cpu() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

// Values every conversion has to get right: ordinary, rounding ties, huge, tiny, negative zero,
// infinities and NaN (for integer sources these saturate or become 0 on the way in).
Tensor awkward_values(DType dtype) {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.5, 0.1, 2.5, 3.5, 255.0, 256.0, -129.0, 65504.0, 70000.0,
                           1e-8, -1e-40, 3e38, -1e300, 1e19, -1e19, 4097.0, 16777217.0, 0.333333,
                           std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 100.0);
  while (v.size() < 100) v.push_back(normal(rng));
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}).to(dtype);
}

// Runs body() in a forked child and returns its wait status. The child makes no core file and
// dies of SIGSEGV by default, even under a sanitizer that catches the signal itself.
int wait_status_of_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &default_action, nullptr);
    sigaction(SIGBUS, &default_action, nullptr);
    int code = 90;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child threw: %s\n", e.what());
      code = 91;
    }
    std::fflush(nullptr);
    std::_Exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

bool died_of_segfault(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV; }
bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

}  // namespace

TEST_CASE("test device: Device::test() is 'testdev', a registered backend", "[core][testdev]") {
  CHECK(Device::test().str() == "testdev:0");
  CHECK(Device::parse("testdev") == Device::test());
  CHECK(Device::parse("testdev:2") == Device::test(2));
  CHECK(Device::test(2).is_test());
  CHECK_FALSE(Device::test().is_cpu());
  CHECK(wf::find_device_backend(wf::DeviceType::test) != nullptr);
  REQUIRE_THROWS_WITH(wf::register_device_backend(wf::DeviceType::test, &wf::device_backend(Device::cpu())),
                      Contains("already have a backend"));
}

TEST_CASE("test device: every dtype goes CPU -> testdev -> CPU bit for bit", "[core][testdev]") {
  unsigned seed = 1;
  for (const DType dtype : kAllDTypes) {
    // 0 elements, a scalar, an odd size, and one large enough for the parallel copy paths.
    for (const wf::Shape& shape : std::vector<wf::Shape>{{0}, {}, {3, 5, 7}, {70001}}) {
      CAPTURE(wf::dtype_name(dtype), wf::shape_str(shape));
      const Tensor host = random_bits(shape, dtype, seed++);
      const Tensor dev = host.to(Device::test());
      CHECK(dev.device() == Device::test());
      CHECK(dev.dtype() == dtype);
      CHECK(dev.shape() == shape);
      if (host.numel() > 0) CHECK(wf::detail::is_test_device_memory(dev.raw_data()));
      CHECK(same_bytes(dev.to(Device::cpu()), host));

      // copy_ both ways into existing tensors, and a clone on the device.
      Tensor dev2 = Tensor::empty(shape, dtype, Device::test());
      dev2.copy_(host);
      Tensor back = Tensor::empty(shape, dtype);
      back.copy_(dev2.clone());
      CHECK(same_bytes(back, host));
    }
  }
}

TEST_CASE("test device: views of its tensors copy the right rows", "[core][testdev]") {
  const Tensor host = Tensor::arange(0, 24).view({6, 4});
  const Tensor dev = host.to(Device::test());
  CHECK(same_bytes(dev.slice0(2, 5).to(Device::cpu()), host.slice0(2, 5).clone()));
  Tensor dst = Tensor::zeros({6, 4}, DType::f32, Device::test());
  dst.slice0(1, 3).copy_(host.slice0(4, 6));
  const Tensor expected = Tensor::zeros({6, 4});
  expected.slice0(1, 3).copy_(host.slice0(4, 6));
  CHECK(same_bytes(dst.to(Device::cpu()), expected));
  REQUIRE_THROWS_WITH(dst.slice0(0, 3).copy_(dst.slice0(1, 4)), Contains("overlap"));
}

TEST_CASE("test device: fill_ matches the CPU's for every dtype", "[core][testdev]") {
  const double values[] = {0.0, -0.0, 1.0, -2.5, 0.1, 1e10, -1e10, 300.0, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (const DType dtype : kAllDTypes) {
    for (const double value : values) {
      CAPTURE(wf::dtype_name(dtype), value);
      Tensor dev = Tensor::empty({1000}, dtype, Device::test());
      dev.fill_(value);
      CHECK(same_bytes(dev.to(Device::cpu()), Tensor::full({1000}, value, dtype)));
      CHECK(same_bytes(Tensor::full({33}, value, dtype, Device::test()).to(Device::cpu()),
                       Tensor::full({33}, value, dtype)));
    }
  }
  CHECK(same_bytes(Tensor::zeros({5}, DType::bf16, Device::test()).to(Device::cpu()), Tensor::zeros({5}, DType::bf16)));
  CHECK(same_bytes(Tensor::ones({5}, DType::i64, Device::test()).to(Device::cpu()), Tensor::ones({5}, DType::i64)));
}

TEST_CASE("test device: dtype conversions match the CPU's bit for bit", "[core][testdev]") {
  for (const DType from : kAllDTypes) {
    const Tensor host = awkward_values(from);
    const Tensor dev = host.to(Device::test());
    for (const DType to : kAllDTypes) {
      CAPTURE(wf::dtype_name(from), wf::dtype_name(to));
      const Tensor expected = host.to(to);
      // On the device...
      const Tensor converted = dev.to(to);
      CHECK(converted.device() == Device::test());
      CHECK(same_bytes(converted.to(Device::cpu()), expected));
      // ...and while crossing to it or from it.
      Tensor up = Tensor::empty(host.shape(), to, Device::test());
      up.copy_(host);
      CHECK(same_bytes(up.to(Device::cpu()), expected));
      Tensor down = Tensor::empty(host.shape(), to);
      down.copy_(dev);
      CHECK(same_bytes(down, expected));
    }
  }
}

TEST_CASE("test device: memory is counted, poisoned when new, and has no cache", "[core][testdev]") {
  const wf::MemoryStats before = wf::memory_stats(Device::test());
  {
    const Tensor t = Tensor::empty({1000}, DType::f32, Device::test());
    CHECK(wf::memory_stats(Device::test()).live_bytes == before.live_bytes + 4000);
    CHECK(wf::memory_stats(Device::test()).allocations == before.allocations + 1);
    // New memory reads as 0xFF bytes: NaN floats, so a kernel that reads what it never wrote shows.
    const Tensor host = t.to(Device::cpu());
    CHECK(std::isnan(host.at(0)));
    CHECK(std::isnan(host.at(999)));
  }
  CHECK(wf::memory_stats(Device::test()).live_bytes == before.live_bytes);
  CHECK(wf::memory_stats(Device::test()).cached_bytes == 0);
  CHECK(wf::memory_cache_limit(Device::test()) == 0);
  REQUIRE_THROWS_WITH(wf::set_memory_cache_limit(1, Device::test()), Contains("no cache"));
  // More than the arena holds: a clear error, not a crash.
  REQUIRE_THROWS_WITH(Tensor::empty({std::int64_t{1} << 50}, DType::u8, Device::test()),
                      Contains("testdev") && Contains("WF_TESTDEV_MB"));
}

TEST_CASE("test device: host reads are refused with the fix", "[core][testdev]") {
  Tensor t = Tensor::ones({2, 3}, DType::f32, Device::test());
  const Tensor one = Tensor::ones({}, DType::f32, Device::test());
  REQUIRE_THROWS_WITH(one.item(), Contains("item()") && Contains("testdev:0") && Contains(".to(Device::cpu())"));
  REQUIRE_THROWS_WITH(t.at(0), Contains("testdev:0") && Contains(".to(Device::cpu())"));
  REQUIRE_THROWS_WITH(t.set(0, 1.0), Contains("testdev:0"));
  REQUIRE_THROWS_WITH(t.to_vector<float>(), Contains("to_vector()") && Contains("[2, 3]") && Contains("testdev:0"));
  // Printing copies the values to the host on purpose.
  CHECK_THAT(t.str(), Contains("device=testdev:0") && Contains("values=[1, 1, 1, 1, 1, 1]"));
  CHECK(one.to(Device::cpu()).item() == 1.0);
}

TEST_CASE("test device: touching its memory from the host faults, inside an access scope it does not",
          "[core][testdev]") {
  const Tensor t = Tensor::full({16}, 3.0, DType::f32, Device::test());
  const int touched = wait_status_of_child([&] {
    volatile const float* p = t.data<float>();
    return p[0] == 3.0f ? 0 : 1;  // never returns: the read faults
  });
  CHECK(died_of_segfault(touched));
  // The same read inside the device's access scope works: the fault above was the protection.
  const int in_scope = wait_status_of_child([&] {
    const wf::detail::TestDeviceAccess access;
    volatile const float* p = t.data<float>();
    return p[0] == 3.0f ? 0 : 1;
  });
  CHECK(exited_with(in_scope, 0));
  // Protection is back after each of the device's own copies and fills.
  const int after_copies = wait_status_of_child([&] {
    Tensor u = t.clone();
    u.fill_(2.0);
    const Tensor host = u.to(Device::cpu());
    if (host.at(15) != 2.0) return 1;
    volatile float* p = u.data<float>();
    p[0] = 1.0f;  // faults
    return 2;
  });
  CHECK(died_of_segfault(after_copies));
}

TEST_CASE("test device: an op on a CPU and a test-device tensor names both devices and the fix", "[core][testdev]") {
  const Tensor host = Tensor::ones({2, 4});
  const Tensor device = Tensor::ones({2, 4}, DType::f32, Device::test());
  // The device check comes before any read, so this runs in the test process itself.
  try {
    wf::add(host, device);
    FAIL("add accepted operands on two devices");
  } catch (const wf::Error& e) {
    const std::string message = e.what();
    CHECK(message.find("add") != std::string::npos);
    CHECK(message.find("cpu and testdev:0") != std::string::npos);
    CHECK(message.find(".to(Device::parse(\"cpu\"))") != std::string::npos);
  }
}

TEST_CASE("test device: reshapes, views and casts work on it without the host", "[core][testdev]") {
  const Tensor host = Tensor::arange(0, 12).view({3, 4});
  const Tensor dev = host.to(Device::test());
  const Tensor reshaped = wf::reshape(dev, {4, 3});
  CHECK(reshaped.device() == Device::test());
  CHECK(same_bytes(reshaped.to(Device::cpu()), wf::reshape(host, {4, 3})));
  const Tensor cast = wf::cast(dev, DType::bf16);
  CHECK(cast.device() == Device::test());
  CHECK(same_bytes(cast.to(Device::cpu()), host.to(DType::bf16)));
}

TEST_CASE("pinned host buffers are writable host memory for every device", "[core][testdev]") {
  for (const Device device : {Device::cpu(), Device::test()}) {
    wf::PinnedHostBuffer buffer(1000, device);
    REQUIRE(buffer.data() != nullptr);
    CHECK(buffer.nbytes() == 1000);
    CHECK(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64 == 0);
    CHECK_FALSE(wf::detail::is_test_device_memory(buffer.data()));
    std::memset(buffer.data(), 7, buffer.nbytes());
    CHECK(static_cast<unsigned char*>(buffer.data())[999] == 7);
  }
#if WF_HAVE_CUDA
  // CUDA's are page-locked by the driver: without a GPU they are refused with the fix (with one,
  // tests/cuda checks them).
  if (wf::cuda_devices().empty())
    REQUIRE_THROWS_WITH(wf::PinnedHostBuffer(10, Device::cuda(3)),
                        Contains("no CUDA GPU is visible") && Contains("train.device: cpu"));
#else
  REQUIRE_THROWS_WITH(wf::PinnedHostBuffer(10, Device::cuda(3)), Contains("cuda:3"));
#endif
}

namespace {
// The test device's streams as worker-thread queues with random delays, for one test.
struct AsyncTestDevice {
  explicit AsyncTestDevice(int max_delay_us) { wf::detail::set_test_device_async(true, max_delay_us); }
  ~AsyncTestDevice() { wf::detail::set_test_device_async(false); }
  AsyncTestDevice(const AsyncTestDevice&) = delete;
  AsyncTestDevice& operator=(const AsyncTestDevice&) = delete;
};
}  // namespace

TEST_CASE("test device, asynchronous streams: one stream's work runs in order", "[core][testdev][stream]") {
  const AsyncTestDevice async(300);
  for (const DType from : kAllDTypes) {
    const Tensor host = awkward_values(from);
    for (const DType to : kAllDTypes) {
      CAPTURE(wf::dtype_name(from), wf::dtype_name(to));
      // Upload, convert, convert back, fill a slice, download: five queued tasks on one stream.
      Tensor dev = host.to(Device::test()).to(to);
      dev.slice0(0, 10).fill_(1.0);
      const Tensor got = dev.to(from).to(Device::cpu());
      Tensor expected = host.to(to);
      expected.slice0(0, 10).fill_(1.0);
      CHECK(same_bytes(got, expected.to(from)));
    }
  }
}

TEST_CASE("test device, asynchronous streams: an event orders two streams, and nothing else does",
          "[core][testdev][stream]") {
  const AsyncTestDevice async(0);
  const wf::Stream producer = wf::Stream::create(Device::test()), consumer = wf::Stream::create(Device::test());
  Tensor x = Tensor::empty({1000}, DType::f32, Device::test());  // new memory: NaN
  Tensor y = Tensor::empty({1000}, DType::f32, Device::test());
  Tensor host;

  // Without a wait the consumer copies x before the stalled producer has filled it.
  wf::detail::test_stream_stall(producer, 200);
  {
    const wf::StreamGuard on(producer);
    x.fill_(1.0);
  }
  CHECK_FALSE(producer.query());
  {
    const wf::StreamGuard on(consumer);
    y.copy_(x);
    host = y.to(Device::cpu());
  }
  CHECK(std::isnan(host.at(0)));
  producer.synchronize();
  CHECK(producer.query());

  // With the consumer waiting for an event recorded after the fill, it sees the fill.
  wf::detail::test_stream_stall(producer, 200);
  {
    const wf::StreamGuard on(producer);
    x.fill_(2.0);
  }
  wf::Event filled;
  filled.record(producer);
  CHECK_FALSE(filled.query());
  consumer.wait(filled);
  {
    const wf::StreamGuard on(consumer);
    y.copy_(x);
    host = y.to(Device::cpu());
  }
  CHECK(filled.query());
  CHECK(host.at(0) == 2.0);
  CHECK(host.at(999) == 2.0);
}
