// AdamW (with its EMA), gradient clipping and gradient accumulation on the GPU against the CPU, on
// the parameters and gradients the test device runs bit for bit (tests/support/optimizer_cases.cpp),
// within each parameter dtype's tolerance (tests/cuda/parity_tolerance.h): the gradients here are
// the same numbers on both devices, scaled by the clipping factor, so AdamW's updates (smooth in
// the gradient away from zero) keep the op tolerance over the steps. Clipping and the update read
// nothing back on the host; a non-finite norm poisons the gradients and skips the update as on the
// CPU.
#include <cmath>
#include <vector>

#include "support/optimizer_cases.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_tolerance.h"
#include "wallfacer/autograd/node.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/train/optimizer.h"

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::cuda_test::mismatch;
using wf::cuda_test::op_tolerance;
using wf::parity::make_params;
using wf::parity::set_grads;

namespace {

// Each parameter (and its gradient, where it has one) against the CPU's, in its own dtype's tolerance.
void check_params(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(mismatch(gpu[i], cpu[i], op_tolerance(cpu[i].dtype())) == "");
    CHECK(mismatch(gpu[i].grad(), cpu[i].grad(), op_tolerance(cpu[i].dtype())) == "");
  }
}

void check_states(const wf::nn::StateDict& gpu, const wf::nn::StateDict& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (const auto& [key, value] : cpu) {
    CAPTURE(key);
    REQUIRE(gpu.contains(key));
    CHECK(mismatch(gpu.at(key), value, op_tolerance(value.dtype())) == "");  // step counts: exact
  }
}

}  // namespace

TEST_CASE("cuda: AdamW with EMA and clipping matches the CPU, reading nothing on the host",
          "[cuda][train][optimizer]") {
  const Device gpu = wf::cuda_test::gpu();
  std::vector<Tensor> cpu = make_params(Device::cpu()), dev = make_params(gpu);
  wf::train::AdamW cpu_opt(cpu, wf::parity::adamw_options()), dev_opt(dev, wf::parity::adamw_options());
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const wf::parity::ClippedStep r = wf::parity::clipped_step(cpu, cpu_opt, dev, dev_opt, gpu, step);
    CHECK(r.device_host_syncs == 0);  // clipping and the update read nothing on the host
    CHECK(r.device_norm.device() == gpu);
    // The norm sums f32 and f64 squares: f32's tolerance.
    CHECK(std::abs(r.device_norm.to(Device::cpu()).item() - r.cpu_norm) <= 1e-5 * r.cpu_norm);
    check_params(dev, cpu);  // the gradients clipped alike
  }
  check_states(dev_opt.state_dict(), cpu_opt.state_dict());
  // A state loaded from the host lands on the parameters' device.
  dev_opt.load_state_dict(cpu_opt.state_dict());
  set_grads(cpu, 9, Device::cpu());
  set_grads(dev, 9, gpu);
  cpu_opt.step();
  dev_opt.step();
  check_params(dev, cpu);
}

TEST_CASE("cuda: a non-finite gradient norm poisons the gradients as on the CPU", "[cuda][train][optimizer]") {
  const wf::parity::PoisonedClip r = wf::parity::poisoned_clip(wf::cuda_test::gpu());
  CHECK(r.device_host_syncs == 1);  // the one read of the skip decision
  CHECK(!std::isfinite(r.cpu_norm));
  CHECK(std::isnan(r.device_norm) == std::isnan(r.cpu_norm));
  for (std::size_t i = 0; i + 1 < r.cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(mismatch(r.dev[i].grad(), r.cpu[i].grad(), op_tolerance(r.cpu[i].dtype())) == "");
  }
}

TEST_CASE("cuda: a non-finite gradient norm skips AdamW's update on the GPU, its step counts included",
          "[cuda][train][optimizer]") {
  const Device gpu = wf::cuda_test::gpu();
  const std::vector<double> scales = wf::parity::skip_scales();
  // The host-decided path on the CPU (the norm read, step() only when it is finite) against the GPU's.
  std::vector<Tensor> host = make_params(Device::cpu()), params = make_params(gpu);
  wf::train::AdamW host_opt(host, wf::parity::adamw_options()), opt(params, wf::parity::adamw_options());
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    // The skip is decided on the GPU: no host read.
    CHECK(wf::parity::device_decided_step(params, opt, gpu, step, scales[step]) == 0);
    wf::parity::host_decided_step(host, host_opt, step, scales[step]);
    if (step == 0) CHECK(opt.state_dict().empty());  // a skipped first step leaves no state to save
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(mismatch(params[i], host[i], op_tolerance(host[i].dtype())) == "");
    CHECK(opt.step_count(i) == host_opt.step_count(i));
  }
  CHECK(opt.step_count(0) == 2);
  check_states(opt.state_dict(), host_opt.state_dict());  // the saved step counts are the updates applied
}

TEST_CASE("cuda: gradient accumulation matches the CPU", "[cuda][train][autograd]") {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(wf::dtype_name(dtype));
    Tensor cpu = Tensor::randn_at({33}, 5, 0, dtype), addend = Tensor::randn_at({33}, 5, 50, dtype);
    Tensor dev = cpu.to(wf::cuda_test::gpu());
    wf::autograd::accumulate_into(cpu, addend);
    wf::autograd::accumulate_into(dev, addend.to(wf::cuda_test::gpu()));
    CHECK(mismatch(dev, cpu, op_tolerance(dtype)) == "");
  }
  Tensor dev = Tensor::zeros({2}, DType::f32, wf::cuda_test::gpu());
  CHECK_THROWS_WITH(wf::autograd::accumulate_into(dev, Tensor::zeros({2})), Catch::Contains("move the tensor"));
}
