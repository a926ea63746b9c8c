// AdamW (with its EMA), gradient clipping and gradient accumulation on the GPU against the CPU, on
// the parameters and gradients the test device runs bit for bit (tests/support/optimizer_cases.cpp),
// within each parameter dtype's tolerance (tests/cuda/parity_tolerance.h): the gradients here are
// the same numbers on both devices, scaled by the clipping factor, so AdamW's updates (smooth in
// the gradient away from zero) keep the op tolerance over the steps. Clipping and the update read
// nothing back on the host; a non-finite norm poisons the gradients and skips the update as on the
// CPU.
#include <cmath>
#include <limits>
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

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  const wf::train::AdamWOptions options{.lr = 0.05, .weight_decay = 0.1, .ema_decay = 0.9};
  wf::train::AdamW cpu_opt(cpu, options), dev_opt(dev, options);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    set_grads(cpu, step, Device::cpu());
    set_grads(dev, step, gpu);
    const double cpu_norm = wf::train::clip_grad_norm(cpu, 1.0);
    const std::int64_t before = wf::host_sync_count();
    const Tensor dev_norm = wf::train::clip_grad_norm_on_device(dev, 1.0);
    dev_opt.step();
    CHECK(wf::host_sync_count() == before);  // clipping and the update read nothing on the host
    cpu_opt.step();
    CHECK(dev_norm.device() == gpu);
    // The norm sums f32 and f64 squares: f32's tolerance.
    CHECK(std::abs(dev_norm.to(Device::cpu()).item() - cpu_norm) <= 1e-5 * cpu_norm);
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
  const Device gpu = wf::cuda_test::gpu();
  std::vector<Tensor> cpu = make_params(Device::cpu()), dev = make_params(gpu);
  set_grads(cpu, 0, Device::cpu(), kInf);
  set_grads(dev, 0, gpu, kInf);
  const double cpu_norm = wf::train::clip_grad_norm(cpu, 1.0);
  const std::int64_t before = wf::host_sync_count();
  const double dev_norm = wf::train::clip_grad_norm(dev, 1.0);
  CHECK(wf::host_sync_count() == before + 1);  // the one read of the skip decision
  CHECK(!std::isfinite(cpu_norm));
  CHECK(std::isnan(dev_norm) == std::isnan(cpu_norm));
  for (std::size_t i = 0; i + 1 < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(mismatch(dev[i].grad(), cpu[i].grad(), op_tolerance(cpu[i].dtype())) == "");
  }
}

TEST_CASE("cuda: a non-finite gradient norm skips AdamW's update on the GPU, its step counts included",
          "[cuda][train][optimizer]") {
  const Device gpu = wf::cuda_test::gpu();
  // Steps 0 and 2 are not finite: the first skipped step comes before any update (no state yet).
  const double scales[] = {kInf, 3.0, std::numeric_limits<double>::quiet_NaN(), 0.5};
  const wf::train::AdamWOptions options{.lr = 0.05, .weight_decay = 0.1, .ema_decay = 0.9};
  // The host-decided path on the CPU (the norm read, step() only when it is finite) against the GPU's.
  std::vector<Tensor> host = make_params(Device::cpu()), params = make_params(gpu);
  wf::train::AdamW host_opt(host, options), opt(params, options);
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    set_grads(params, step, gpu, scales[step]);
    const std::int64_t before = wf::host_sync_count();
    opt.step(wf::train::clip_grad_norm_on_device(params, 1.0));
    CHECK(wf::host_sync_count() == before);  // the skip is decided on the device
    set_grads(host, step, Device::cpu(), scales[step]);
    if (std::isfinite(wf::train::clip_grad_norm(host, 1.0))) host_opt.step();
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
