// The CUDA device backend (src/core/cuda): memory and its statistics, copies, dtype conversions
// and fills against the CPU's bit for bit, streams and events, out-of-memory, and CudaScratch.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "src/core/cuda/cuda_device.h"
#include "tests/cuda/cuda_test_util.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/storage.h"

using Catch::Contains;
using wf::Device;
using wf::DType;
using wf::Stream;
using wf::Tensor;
using wf::cuda_test::gpu;

namespace {

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};

// A CPU tensor of `dtype` with random bytes: every bit pattern, NaNs of every payload included.
Tensor random_bits(std::int64_t n, DType dtype, std::uint64_t seed) {
  Tensor t = Tensor::empty({n}, dtype);
  std::mt19937_64 rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

bool is_nan_at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return std::isnan(t.data<float>()[i]);
    case DType::f64: return std::isnan(t.data<double>()[i]);
    case DType::bf16: return std::isnan(wf::bf16_to_float(t.data<wf::bf16>()[i]));
    case DType::f16: return std::isnan(wf::f16_to_float(t.data<wf::f16>()[i]));
    default: return false;
  }
}

// REQUIREs the same bytes element by element, except that a NaN matches any NaN: its payload
// after float <-> double is the hardware's business (the kernels copy x86's and the host
// compiler's folding, which tests/core/cuda_convert_rules_test.cpp checks), its being a NaN is not.
void require_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.device().is_cpu());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.numel() == want.numel());
  const std::size_t size = wf::dtype_size(got.dtype());
  const auto* g = static_cast<const unsigned char*>(got.raw_data());
  const auto* w = static_cast<const unsigned char*>(want.raw_data());
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(g + i * size, w + i * size, size) == 0) continue;
    INFO("element " << i << " of " << got.numel() << ": got " << got.str() << "; want " << want.str());
    REQUIRE((is_nan_at(got, i) && is_nan_at(want, i)));
  }
}

// Values each conversion has to get right, as f64: rounding ties of bf16 and f16 (and a value
// just above a tie that only a round-to-odd float keeps above it), f16's overflow tie and
// subnormals, f32 and f64 subnormals, signed zeros, infinities, NaN, integers at and beyond the
// limits of i32 and i64 and of exact float and double, and ordinary values.
Tensor awkward_values(DType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0, -0.0, 1.0, -1.5, 0.1, 2.5, 3.5, -0.5, 0.49999999999999994, 255.0, 255.5, 256.0,
                           -129.0, 1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8),
                           1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                           1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -11),
                           1.0 + 3 * std::ldexp(1.0, -11), 2049.0, 65504.0, 65519.99, 65520.0, 70000.0,
                           std::ldexp(1.0, -25), 3 * std::ldexp(1.0, -25), std::ldexp(1.0, -24), 6e-8, 1e-8, -1e-40,
                           1e-310, 3e38, 3.4028235677973366e38, -1e300, 1e19, -1e19, 4097.0, 16777217.0,
                           2147483647.0, 2147483647.5, 2147483648.0, -2147483648.0, -2147483649.0, 3e9,
                           9007199254740993.0, 9223372036854775807.0, -9223372036854775808.0, 0.333333, inf, -inf,
                           std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN()};
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 100.0);
  while (v.size() < 300) v.push_back(normal(rng));
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}).to(dtype);
}

// Integers that no double holds exactly (i64 -> f32 rounds twice, through double, as on the CPU).
Tensor large_i64() {
  std::vector<std::int64_t> v = {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
                                 (std::int64_t{1} << 53) + 1, (std::int64_t{1} << 62) + 1, -(std::int64_t{1} << 62) - 3,
                                 (std::int64_t{1} << 24) + 1, 2147483648LL, -2147483649LL, 300, -7};
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
}

}  // namespace

TEST_CASE("cuda backend: the device's properties and streams", "[cuda][device_memory]") {
  REQUIRE(wf::detail::cuda_device_count() >= 1);
  CHECK(wf::detail::cuda_multiprocessors(gpu()) > 0);
  CHECK(wf::detail::cuda_compute_capability(gpu()) >= 80);
  // The main stream is a stream of its own, not CUDA's legacy or per-thread default stream.
  const cudaStream_t main = wf::detail::cuda_stream(Stream::default_for(gpu()));
  CHECK(main != nullptr);
  CHECK(main != cudaStreamLegacy);
  CHECK(main != cudaStreamPerThread);
  CHECK(wf::detail::cuda_stream(Stream::default_for(gpu())) == main);
  // A created stream: its handle is the cudaStream_t.
  const Stream s = Stream::create(gpu());
  CHECK(s.handle() != 0);
  CHECK(wf::detail::cuda_stream(s) == reinterpret_cast<cudaStream_t>(s.handle()));
  CHECK(Stream::create(gpu()).handle() != s.handle());
  {
    const wf::StreamGuard guard(s);
    CHECK(Stream::current(gpu()) == s);
  }
  CHECK(Stream::current(gpu()) == Stream::default_for(gpu()));
  // Wrong streams and devices are named.
  REQUIRE_THROWS_WITH(wf::detail::cuda_stream(Stream()), Contains("cpu") && Contains("not a CUDA"));
  REQUIRE_THROWS_WITH(wf::detail::cuda_stream(Stream(Device::cuda(63), 0)),
                      Contains("cuda:63") && Contains("visible GPU(s)"));
  REQUIRE_THROWS_WITH(Tensor::zeros({4}, DType::f32, Device::cuda(63)), Contains("cuda:63"));
}

TEST_CASE("cuda backend: memory is counted, cached after a free and reused", "[cuda][device_memory]") {
  constexpr std::int64_t kBytes = std::int64_t{64} << 20;  // far above the pool's chunk size
  wf::synchronize(gpu());
  wf::empty_cache(gpu());
  CHECK(wf::memory_cache_limit(gpu()) == std::numeric_limits<std::size_t>::max());
  const wf::MemoryStats before = wf::memory_stats(gpu());
  {
    const Tensor t = Tensor::empty({kBytes}, DType::u8, gpu());
    const wf::MemoryStats during = wf::memory_stats(gpu());
    CHECK(during.live_bytes == before.live_bytes + kBytes);
    CHECK(during.peak_bytes >= during.live_bytes);
    CHECK(during.allocations == before.allocations + 1);
  }
  wf::synchronize(gpu());  // the free has run
  const wf::MemoryStats freed = wf::memory_stats(gpu());
  CHECK(freed.live_bytes == before.live_bytes);
  CHECK(freed.cached_bytes >= before.cached_bytes + kBytes);  // kept by the pool, not given back
  {
    // The same size again comes from the cache: no new memory from the driver.
    const Tensor again = Tensor::empty({kBytes}, DType::u8, gpu());
    const wf::MemoryStats reused = wf::memory_stats(gpu());
    CHECK(reused.cache_hits >= freed.cache_hits + 1);
    CHECK(reused.cached_bytes <= freed.cached_bytes - kBytes);
  }
  wf::empty_cache(gpu());
  CHECK(wf::memory_stats(gpu()).cached_bytes < kBytes);
  // Every block is aligned for any dtype's vector loads, whatever its size.
  for (const std::int64_t n : {1, 3, 33, 1000, 4097}) {
    const Tensor t = Tensor::empty({n}, DType::u8, gpu());
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 256 == 0);
  }
  // The cache limit is the pool's release threshold.
  wf::set_memory_cache_limit(0, gpu());
  CHECK(wf::memory_cache_limit(gpu()) == 0);
  wf::set_memory_cache_limit(std::numeric_limits<std::size_t>::max(), gpu());
  CHECK(wf::memory_cache_limit(gpu()) == std::numeric_limits<std::size_t>::max());
}

TEST_CASE("cuda backend: every dtype goes CPU -> GPU -> CPU bit for bit", "[cuda][device_memory]") {
  for (const DType dtype : kAllDTypes) {
    for (const std::int64_t n : {0, 1, 31, 33, 257, 100003}) {
      CAPTURE(wf::dtype_name(dtype), n);
      const Tensor host = random_bits(n, dtype, wf::cuda_test::fresh_seed(static_cast<std::uint64_t>(n) + 11));
      const Tensor dev = host.to(gpu());
      CHECK(dev.device() == gpu());
      const Tensor back = dev.to(Device::cpu());
      REQUIRE(back.nbytes() == host.nbytes());
      CHECK((n == 0 || std::memcmp(back.raw_data(), host.raw_data(), host.nbytes()) == 0));
      // A copy on the device, and a clone, are byte copies too.
      Tensor copy = Tensor::empty({n}, dtype, gpu());
      copy.copy_(dev);
      const Tensor copied = copy.clone().to(Device::cpu());
      CHECK((n == 0 || std::memcmp(copied.raw_data(), host.raw_data(), host.nbytes()) == 0));
    }
  }
}

TEST_CASE("cuda backend: every dtype conversion matches the CPU's bit for bit", "[cuda][device_memory]") {
  for (const DType from : kAllDTypes) {
    std::vector<Tensor> inputs = {awkward_values(from), random_bits(1001, from, wf::cuda_test::fresh_seed(21))};
    if (from == DType::i64) inputs.push_back(large_i64());
    for (const Tensor& host : inputs) {
      const Tensor dev = host.to(gpu());
      for (const DType to : kAllDTypes) {
        CAPTURE(wf::dtype_name(from), wf::dtype_name(to), host.numel());
        const Tensor expected = host.to(to);
        // On the device...
        const Tensor converted = dev.to(to);
        CHECK(converted.device() == gpu());
        require_same_bits(converted.to(Device::cpu()), expected, "converted on the GPU");
        // ...and while crossing to it or from it.
        Tensor up = Tensor::empty(host.shape(), to, gpu());
        up.copy_(host);
        require_same_bits(up.to(Device::cpu()), expected, "converted on the way up");
        Tensor down = Tensor::empty(host.shape(), to);
        down.copy_(dev);
        require_same_bits(down, expected, "converted on the way down");
      }
    }
  }
  // Nothing to convert is nothing to do.
  CHECK(Tensor::empty({0}, DType::f32, gpu()).to(DType::bf16).numel() == 0);
}

TEST_CASE("cuda backend: fill matches the CPU's for every dtype", "[cuda][device_memory]") {
  const double values[] = {0.0, -0.0, 1.0, -2.5, 0.1, 1e10, -1e10, 300.0, 65520.0, 1.0 + std::ldexp(1.0, -8),
                           std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
  for (const DType dtype : kAllDTypes) {
    for (const double value : values) {
      for (const std::int64_t n : {1, 33, 100003}) {
        CAPTURE(wf::dtype_name(dtype), value, n);
        Tensor dev = Tensor::empty({n}, dtype, gpu());
        dev.fill_(value);
        require_same_bits(dev.to(Device::cpu()), Tensor::full({n}, value, dtype), "fill_");
      }
    }
  }
  require_same_bits(Tensor::ones({5}, DType::i64, gpu()).to(Device::cpu()), Tensor::ones({5}, DType::i64), "ones");
  require_same_bits(Tensor::zeros({7}, DType::bf16, gpu()).to(Device::cpu()), Tensor::zeros({7}, DType::bf16), "zeros");
}

TEST_CASE("cuda backend: an event orders two streams; queries and host waits", "[cuda][device_memory]") {
  constexpr std::int64_t kN = std::int64_t{1} << 24;
  const Stream producer = Stream::create(gpu());
  const Stream consumer = Stream::create(gpu());
  Tensor x = Tensor::empty({kN}, DType::f32, gpu());
  Tensor seen = Tensor::empty({kN}, DType::f64, gpu());
  wf::synchronize(gpu());  // the allocations are behind every stream
  wf::Event filled;
  {
    const wf::StreamGuard guard(producer);
    // A long queue of work on the producer (about a gigabyte of traffic), then the value the
    // consumer must see: 3, written last.
    x.fill_(1.0);
    for (int i = 0; i < 20; ++i) x.copy_(x.to(DType::f64).to(DType::f32));
    x.fill_(3.0);
    filled.record(producer);
  }
  {
    const wf::StreamGuard guard(consumer);
    // Nothing but the event orders the consumer after the producer: it allocates nothing (an
    // allocation would wait for the main stream, which waits for the producer's frees).
    consumer.wait(filled);
    seen.copy_(x);  // converted on the consumer
    wf::Event done;
    done.record(consumer);
    done.synchronize();
    CHECK(done.query());
    CHECK(consumer.query());
    CHECK(filled.query());
    const Tensor host = seen.to(Device::cpu());
    CHECK(host.at(0) == 3.0);
    CHECK(host.at(kN / 2) == 3.0);
    CHECK(host.at(kN - 1) == 3.0);
  }
  producer.synchronize();
  CHECK(producer.query());
  // Each host wait counts once.
  const std::int64_t syncs = wf::host_sync_count();
  producer.synchronize();
  wf::synchronize(gpu());
  CHECK(wf::host_sync_count() == syncs + 2);
}

TEST_CASE("cuda backend: tensors made and dropped under a StreamGuard are safe on its stream",
          "[cuda][device_memory]") {
  const Stream side = Stream::create(gpu());
  const Tensor host = wf::cuda_test::random_normal({4096}, wf::cuda_test::fresh_seed(5));
  Tensor result;
  {
    const wf::StreamGuard guard(side);
    for (int i = 0; i < 10; ++i) {
      // Each temporary is allocated and freed in the main stream's order while it is used on
      // `side`: the backend joins the two streams so that no block is reused too early.
      const Tensor up = host.to(gpu());
      result = up.to(DType::f64).to(DType::f32);
    }
    result = result.to(Device::cpu());
  }
  wf::cuda_test::require_equal(result, host, "round trips on a side stream");
}

TEST_CASE("cuda backend: out of memory names the request and the fixes", "[cuda][device_memory]") {
  const std::int64_t absurd = std::int64_t{1} << 50;  // a PiB
  REQUIRE_THROWS_WITH(Tensor::empty({absurd}, DType::u8, gpu()),
                      Contains("cuda:0") && Contains("out of memory") && Contains("1125899906842624 bytes") &&
                          Contains("GiB free of") && Contains("train.micro_batch_size") &&
                          Contains("model.checkpoint_attention") && Contains("parallel.sp") &&
                          Contains("parallel.tp"));
  // The failure leaves nothing behind: the device works on.
  wf::cuda_test::require_equal(Tensor::ones({10}, DType::f32, gpu()).to(Device::cpu()), Tensor::ones({10}), "after");
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("cuda backend: pinned host buffers are page-locked host memory", "[cuda][device_memory]") {
  wf::PinnedHostBuffer buffer(1000, gpu());
  REQUIRE(buffer.data() != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64 == 0);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, buffer.data()) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeHost);
  std::memset(buffer.data(), 7, buffer.nbytes());
  CHECK(static_cast<unsigned char*>(buffer.data())[999] == 7);
}

TEST_CASE("cuda backend: a released pinned block is reused only once its queued copy has run",
          "[cuda][device_memory]") {
  constexpr std::int64_t kCount = 5000;  // one size class for the three blocks
  wf::empty_cache(gpu());               // no cached pinned block but the two below
  // Two blocks of one class, made before the stream stalls (no cudaHostAlloc while it does).
  const void* first = nullptr;
  const void* spare = nullptr;
  {
    const Tensor a = Tensor::empty_pinned({kCount}, DType::i32, gpu());
    const Tensor b = Tensor::empty_pinned({kCount}, DType::i32, gpu());
    first = a.raw_data();
    spare = b.raw_data();
  }
  const Stream side = Stream::create(gpu());
  Tensor device;
  {
    wf::StreamGuard on(side);
    device = Tensor::empty({kCount}, DType::i32, gpu());
  }
  // The side stream stalls until `go` (60 s at most, so that a failure cannot hang the suite).
  std::atomic<bool> go{false};
  const auto stall = [](void* flag) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!static_cast<std::atomic<bool>*>(flag)->load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  };
  REQUIRE(cudaLaunchHostFunc(wf::detail::cuda_stream(side), stall, &go) == cudaSuccess);
  const void* staged = nullptr;
  {
    Tensor pinned = Tensor::empty_pinned({kCount}, DType::i32, gpu());
    staged = pinned.raw_data();
    for (std::int64_t i = 0; i < kCount; ++i) pinned.data<std::int32_t>()[i] = static_cast<std::int32_t>(3 * i + 1);
    wf::StreamGuard on(side);
    device.copy_(pinned);  // queued behind the stall
  }  // released with its copy still queued
  CHECK((staged == first || staged == spare));
  Tensor next = Tensor::empty_pinned({kCount}, DType::i32, gpu());
  CHECK(next.raw_data() != staged);  // the idle block, not the one the copy will read
  std::memset(next.raw_data(), 0xff, next.nbytes());
  go.store(true);
  side.synchronize();
  const Tensor back = device.to(Device::cpu());
  for (std::int64_t i = 0; i < kCount; ++i)
    REQUIRE(back.data<std::int32_t>()[i] == static_cast<std::int32_t>(3 * i + 1));
  // Its copy has run: the block is reused.
  const Tensor reused = Tensor::empty_pinned({kCount}, DType::i32, gpu());
  CHECK(reused.raw_data() == staged);
}

TEST_CASE("cuda backend: CudaScratch holds its upload on a side stream and frees in stream order",
          "[cuda][device_memory]") {
  const Stream side = Stream::create(gpu());
  const cudaStream_t native = wf::detail::cuda_stream(side);
  constexpr std::size_t kCount = 100003;
  std::vector<std::int32_t> values(kCount);
  for (std::size_t i = 0; i < kCount; ++i) values[i] = static_cast<std::int32_t>(i * 7 + 1);
  const std::vector<std::int32_t> expected = values;
  // From pageable memory, and from page-locked memory, both overwritten as soon as the
  // constructor returns: the scratch holds what they held then.
  wf::PinnedHostBuffer pinned(kCount * sizeof(std::int32_t), gpu());
  std::memcpy(pinned.data(), values.data(), pinned.nbytes());
  for (const void* source : {static_cast<const void*>(values.data()), static_cast<const void*>(pinned.data())}) {
    for (int round = 0; round < 3; ++round) {
      std::vector<std::int32_t> back(kCount, -1);
      {
        const wf::detail::CudaScratch scratch(side, source, kCount * sizeof(std::int32_t));
        std::fill(values.begin(), values.end(), -5);
        std::memset(pinned.data(), 0, pinned.nbytes());
        REQUIRE(scratch.data() != nullptr);
        CHECK(scratch.nbytes() == kCount * sizeof(std::int32_t));
        REQUIRE(cudaMemcpyAsync(back.data(), scratch.as<std::int32_t>(), scratch.nbytes(), cudaMemcpyDeviceToHost,
                                native) == cudaSuccess);
      }  // freed while the copy may still be queued on `side`
      side.synchronize();
      CHECK(back == expected);
      values = expected;
      std::memcpy(pinned.data(), expected.data(), pinned.nbytes());
    }
  }
  // Scratch without an upload, and an empty one.
  {
    const wf::detail::CudaScratch scratch(side, 4096);
    CHECK(scratch.data() != nullptr);
    REQUIRE(cudaMemsetAsync(scratch.data(), 0, 4096, native) == cudaSuccess);
    const wf::detail::CudaScratch empty(side, 0);
    CHECK(empty.nbytes() == 0);
  }
  side.synchronize();
  CHECK(cudaGetLastError() == cudaSuccess);
}
