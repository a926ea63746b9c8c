// AdamW (with its EMA), gradient clipping and gradient accumulation on the test device
// (src/core/test_device.h), whose memory the host cannot touch: they run through the kernel seam
// and agree with the CPU bit for bit, and clipping reads nothing back on the host. The parameters
// and gradients are tests/support/optimizer_cases.cpp (tests/cuda/test_optimizer_on_cuda.cpp runs
// the same cases on a GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/async_streams.h"
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

}  // namespace

TEST_CASE("AdamW with EMA and clipping on the test device matches the CPU bit for bit", "[train][optimizer][testdev]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const wf::parity::AsyncStreams streams(async, 50);
  std::vector<Tensor> cpu = make_params(Device::cpu()), dev = make_params(Device::test());
  const wf::train::AdamWOptions options = wf::parity::adamw_options();
  wf::train::AdamW cpu_opt(cpu, options), dev_opt(dev, options);
  for (int step = 0; step < 3; ++step) {
    const wf::parity::ClippedStep r = wf::parity::clipped_step(cpu, cpu_opt, dev, dev_opt, Device::test(), step);
    CHECK(r.device_host_syncs == 0);  // clipping and the update read nothing on the host
    CHECK(r.device_norm.device() == Device::test());
    CHECK(r.device_norm.to(Device::cpu()).item() == r.cpu_norm);
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
  const wf::parity::PoisonedClip r = wf::parity::poisoned_clip(Device::test());
  CHECK(r.device_host_syncs == 1);  // the one read of the skip decision
  CHECK(!std::isfinite(r.cpu_norm));
  CHECK(std::isnan(r.device_norm) == std::isnan(r.cpu_norm));
  for (std::size_t i = 0; i + 1 < r.cpu.size(); ++i) CHECK(same_bits(r.dev[i].grad(), r.cpu[i].grad()));
}

TEST_CASE("a non-finite gradient norm skips AdamW's update on the device, its step counts included",
          "[train][optimizer][testdev]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const wf::parity::AsyncStreams streams(async, 50);
  const std::vector<double> scales = wf::parity::skip_scales();
  const wf::train::AdamWOptions options = wf::parity::adamw_options();
  // The host-decided path (the norm read, step() only when it is finite) against the device's.
  std::vector<Tensor> host = make_params(Device::cpu());
  wf::train::AdamW host_opt(host, options);
  for (const Device device : {Device::cpu(), Device::test()}) {
    CAPTURE(device.str());
    std::vector<Tensor> params = make_params(device);
    wf::train::AdamW opt(params, options);
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      // The skip is decided on the device: no host read.
      CHECK(wf::parity::device_decided_step(params, opt, device, step, scales[step]) == 0);
      if (device.is_cpu()) wf::parity::host_decided_step(host, host_opt, step, scales[step]);
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
