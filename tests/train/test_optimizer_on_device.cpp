// AdamW (with its EMA), gradient clipping and gradient accumulation on the test device
// (src/core/test_device.h), whose memory the host cannot touch: they run through the kernel seam
// and agree with the CPU bit for bit, and clipping reads nothing back on the host. The parameters
// and gradients are tests/support/optimizer_cases.cpp (tests/cuda/test_optimizer_on_cuda.cpp runs
// the same cases on a GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/core/test_device_streams.h"
#include "support/optimizer_cases.h"
#include "wallfacer/autograd/node.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/train/optimizer.h"

using wf::Device;
using wf::DType;
using wf::Tensor;

namespace {

// Bitwise equality of two tensors' bytes (read on the host).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

using wf::parity::make_params;
using wf::parity::set_grads;

// Asynchronous test-device streams for the scope: kernels run later, on worker threads.
struct AsyncStreams {
  explicit AsyncStreams(bool on) { wf::detail::set_test_device_async(on, 50); }
  ~AsyncStreams() { wf::detail::set_test_device_async(false); }
};

}  // namespace

TEST_CASE("AdamW with EMA and clipping on the test device matches the CPU bit for bit", "[train][optimizer][testdev]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const AsyncStreams streams(async);
  std::vector<Tensor> cpu = make_params(Device::cpu()), dev = make_params(Device::test());
  const wf::train::AdamWOptions options{.lr = 0.05, .weight_decay = 0.1, .ema_decay = 0.9};
  wf::train::AdamW cpu_opt(cpu, options), dev_opt(dev, options);
  for (int step = 0; step < 3; ++step) {
    set_grads(cpu, step, Device::cpu());
    set_grads(dev, step, Device::test());
    const double cpu_norm = wf::train::clip_grad_norm(cpu, 1.0);
    const std::int64_t before = wf::host_sync_count();
    const Tensor dev_norm = wf::train::clip_grad_norm_on_device(dev, 1.0);
    dev_opt.step();
    CHECK(wf::host_sync_count() == before);  // clipping and the update read nothing on the host
    cpu_opt.step();
    CHECK(dev_norm.device() == Device::test());
    CHECK(dev_norm.to(Device::cpu()).item() == cpu_norm);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(step, i);
      CHECK(same_bits(dev[i], cpu[i]));
      if (cpu[i].grad().defined()) CHECK(same_bits(dev[i].grad(), cpu[i].grad()));  // clipped alike
    }
  }
  const wf::nn::StateDict cpu_state = cpu_opt.state_dict(), dev_state = dev_opt.state_dict();
  REQUIRE(cpu_state.size() == dev_state.size());
  for (const auto& [key, value] : cpu_state) {
    CAPTURE(key);
    CHECK(same_bits(dev_state.at(key), value));
  }
  // A state loaded from the host lands on the parameters' device.
  dev_opt.load_state_dict(cpu_state);
  set_grads(cpu, 9, Device::cpu());
  set_grads(dev, 9, Device::test());
  cpu_opt.step();
  dev_opt.step();
  for (std::size_t i = 0; i < cpu.size(); ++i) CHECK(same_bits(dev[i], cpu[i]));
}

TEST_CASE("a non-finite gradient norm stays on the test device and poisons the gradients as on the CPU",
          "[train][optimizer][testdev]") {
  std::vector<Tensor> cpu = make_params(Device::cpu()), dev = make_params(Device::test());
  set_grads(cpu, 0, Device::cpu(), std::numeric_limits<double>::infinity());
  set_grads(dev, 0, Device::test(), std::numeric_limits<double>::infinity());
  const double cpu_norm = wf::train::clip_grad_norm(cpu, 1.0);
  const std::int64_t before = wf::host_sync_count();
  const double dev_norm = wf::train::clip_grad_norm(dev, 1.0);
  CHECK(wf::host_sync_count() == before + 1);  // the one read of the skip decision
  CHECK(!std::isfinite(cpu_norm));
  CHECK(std::isnan(dev_norm) == std::isnan(cpu_norm));
  for (std::size_t i = 0; i + 1 < cpu.size(); ++i) CHECK(same_bits(dev[i].grad(), cpu[i].grad()));
}

TEST_CASE("a non-finite gradient norm skips AdamW's update on the device, its step counts included",
          "[train][optimizer][testdev]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const AsyncStreams streams(async);
  // Steps 0 and 2 are not finite: the first skipped step comes before any update (no state yet).
  const double scales[] = {std::numeric_limits<double>::infinity(), 3.0, std::numeric_limits<double>::quiet_NaN(),
                           0.5};
  const wf::train::AdamWOptions options{.lr = 0.05, .weight_decay = 0.1, .ema_decay = 0.9};
  // The host-decided path (the norm read, step() only when it is finite) against the device's.
  std::vector<Tensor> host = make_params(Device::cpu());
  wf::train::AdamW host_opt(host, options);
  for (const Device device : {Device::cpu(), Device::test()}) {
    CAPTURE(device.str());
    std::vector<Tensor> params = make_params(device);
    wf::train::AdamW opt(params, options);
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      set_grads(params, step, device, scales[step]);
      const std::int64_t before = wf::host_sync_count();
      opt.step(wf::train::clip_grad_norm_on_device(params, 1.0));
      CHECK(wf::host_sync_count() == before);  // the skip is decided on the device
      if (device.is_cpu()) {
        set_grads(host, step, Device::cpu(), scales[step]);
        if (std::isfinite(wf::train::clip_grad_norm(host, 1.0))) host_opt.step();
      }
      if (step == 0) CHECK(opt.state_dict().empty());  // a skipped first step leaves no state to save
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK(same_bits(params[i], host[i]));
      CHECK(opt.step_count(i) == host_opt.step_count(i));
    }
    CHECK(opt.step_count(0) == 2);
    const wf::nn::StateDict want = host_opt.state_dict(), got = opt.state_dict();
    REQUIRE(got.size() == want.size());
    for (const auto& [key, value] : want) {
      CAPTURE(key);
      CHECK(same_bits(got.at(key), value));  // the saved step counts are the updates applied
    }
  }
}

TEST_CASE("gradient accumulation on the test device matches the CPU bit for bit", "[train][autograd][testdev]") {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(wf::dtype_name(dtype));
    Tensor cpu = Tensor::randn_at({33}, 5, 0, dtype), addend = Tensor::randn_at({33}, 5, 50, dtype);
    Tensor dev = cpu.to(Device::test());
    wf::autograd::accumulate_into(cpu, addend);
    wf::autograd::accumulate_into(dev, addend.to(Device::test()));
    CHECK(same_bits(dev, cpu));
  }
  Tensor dev = Tensor::zeros({2}, DType::f32, Device::test());
  CHECK_THROWS_WITH(wf::autograd::accumulate_into(dev, Tensor::zeros({2})), Catch::Contains("move the tensor"));
}
