// Tiny GPT, LLaMA and DiT models (tests/support/model_cases.cpp, which the test device runs bit for
// bit) with parameters and batch on the GPU against the CPU, in f32 and in bf16 mixed precision
// (f32 masters, bf16 compute): the decoders' logits, every model's loss and gradients (the decoders'
// also on packed documents), and the parameters after one AdamW step from those gradients.
// Tolerances below, with why. First the models' own arithmetic (the timestep embedding, row
// selection, diffusion's noising and loss with L_vb and its gradients, the DDIM sampler's clamp),
// in f32 within op_tolerance.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "support/model_cases.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_tolerance.h"
#include "wallfacer/train/optimizer.h"

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::cuda_test::Tolerance;

namespace {

constexpr double kLr = 1e-2;
constexpr double kEps = 1e-8;  // the step's ε

// What a model's comparison allows, by the dtype it computes in.
// - f32: the loss within 1e-5 relative (the bound). A gradient crosses the two layers'
//   ~20 ops twice, each adding differences of ~1e-6 of its magnitude (op_tolerance's argument),
//   and a weight's gradient sums over the batch's 16 tokens, whose terms cancel: 1e-4 of the
//   tensor's largest element. Parameters after one step: AdamW's first update is
//   lr·g/(|g| + ε), insensitive to g's size, so they agree to f32 roundings: 1e-5.
// - bf16: the loss and the gradients within 2e-2 (op_tolerance's bf16 argument: both devices
//   round each op's result to bf16, and rarely on different sides); the parameters are f32
//   masters stepped in f32, as above.
// Where the CPU's gradient element lies within its bound of zero its sign is not determined at
// that precision, and the first AdamW step moves the parameter by ±lr; within 100·ε (AdamW's
// ε = 1e-8) of zero the step's size depends on the gradient's (d/dg of g/(|g| + ε) is ε/(|g| + ε)²).
// Those elements may differ by 2·lr (sign_allowance).
struct ModelTolerance {
  double loss;
  Tolerance grad, step;
};

ModelTolerance model_tolerance(DType compute) {
  if (compute == DType::bf16) return {2e-2, {2e-2, 2e-2}, {1e-5, 1e-5}};
  return {1e-5, {1e-4, 1e-4}, {1e-5, 1e-5}};
}

// A model's loss ("loss") and gradients (by parameter name), then its parameters after one AdamW
// step (by name), all copied to the CPU.
struct ModelRun {
  std::map<std::string, Tensor> loss_and_grads, stepped;
};

ModelRun step_once(wf::nn::Module& model, const std::map<std::string, Tensor>& loss_and_grads) {
  ModelRun run;
  for (const auto& [name, t] : loss_and_grads) run.loss_and_grads[name] = t.defined() ? t.to(Device::cpu()) : t;
  wf::train::AdamW optimizer(model.parameters(), {.lr = kLr, .eps = kEps, .weight_decay = 0.1});
  optimizer.step();
  for (const auto& [name, p] : model.named_parameters()) run.stepped[name] = p.detach().to(Device::cpu());
  return run;
}

// 2·lr where |grad| lies within `tol` or 100·ε of zero (the first step's sign or size undetermined), else 0.
Tensor sign_allowance(const Tensor& grad, Tolerance tol) {
  const Tensor g = grad.to(DType::f64);
  Tensor allowance = Tensor::zeros(g.shape(), DType::f64);
  const double floor = tol.floor * wf::cuda_test::largest_magnitude(g);
  const double* gp = g.data<double>();
  double* ap = allowance.data<double>();
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (std::abs(gp[i]) <= std::max(tol.rtol * std::abs(gp[i]) + floor, 100 * kEps)) ap[i] = 2 * kLr;
  }
  return allowance;
}

void check_model_runs(const ModelRun& gpu, const ModelRun& cpu, DType compute) {
  const ModelTolerance tol = model_tolerance(compute);
  INFO("computing in " << wf::dtype_name(compute));
  REQUIRE(gpu.loss_and_grads.size() == cpu.loss_and_grads.size());
  for (const auto& [name, want] : cpu.loss_and_grads) {
    INFO(name);
    REQUIRE(gpu.loss_and_grads.count(name) == 1);
    const Tolerance bound = name == "loss" ? Tolerance{tol.loss, 0} : tol.grad;
    CHECK(wf::cuda_test::mismatch(gpu.loss_and_grads.at(name), want, bound) == "");
  }
  for (const auto& [name, want] : cpu.stepped) {
    INFO(name << " after one AdamW step");
    REQUIRE(gpu.stepped.count(name) == 1);
    const Tensor& grad = cpu.loss_and_grads.at(name);
    const Tensor allowance = grad.defined() ? sign_allowance(grad, tol.grad) : Tensor();
    CHECK(wf::cuda_test::mismatch(gpu.stepped.at(name), want, tol.step, allowance) == "");
  }
}

ModelRun decoder_run(const std::string& kind, DType compute, Device device, bool packed) {
  const std::unique_ptr<wf::models::DecoderLM> model = wf::parity::tiny_decoder(kind);
  if (compute != DType::f32) model->set_compute_dtype(compute);
  return step_once(*model, wf::parity::decoder_loss(*model, device, packed));
}

ModelRun dit_run(DType compute, Device device) {
  const std::unique_ptr<wf::models::Dit> model = wf::parity::tiny_dit();
  if (compute != DType::f32) model->set_compute_dtype(compute);
  return step_once(*model, wf::parity::dit_loss(*model, device, true));
}

}  // namespace

TEST_CASE("cuda: the timestep embedding, row selection and the DDIM sampler match the CPU",
          "[cuda][models][dit]") {
  const Device gpu = wf::cuda_test::gpu();
  const Tolerance f32 = wf::cuda_test::op_tolerance(DType::f32);
  const Tensor embedding = wf::parity::timestep_embedding_on(gpu);
  CHECK(wf::cuda_test::mismatch(embedding, wf::parity::timestep_embedding_on(Device::cpu()), f32) == "");
  const Tensor selected = wf::parity::selected_rows_on(gpu);
  CHECK(selected.device() == gpu);
  CHECK(wf::cuda_test::mismatch(selected, wf::parity::selected_rows_on(Device::cpu()), {}) == "");  // a gather: exact
  const Tensor sample = wf::parity::ddim_sample_on(gpu);
  CHECK(sample.device() == gpu);
  CHECK(wf::cuda_test::mismatch(sample, wf::parity::ddim_sample_on(Device::cpu()), f32) == "");
}

TEST_CASE("cuda: diffusion noising, the loss with L_vb and its gradients match the CPU", "[cuda][models][dit]") {
  const auto kind = GENERATE(wf::models::DiffusionKind::ddpm, wf::models::DiffusionKind::flow);
  INFO(wf::models::diffusion_kind_name(kind));
  const wf::parity::DiffusionRun gpu = wf::parity::diffusion_run(kind, wf::cuda_test::gpu());
  const wf::parity::DiffusionRun cpu = wf::parity::diffusion_run(kind, Device::cpu());
  const Tolerance f32 = wf::cuda_test::op_tolerance(DType::f32);
  CHECK(gpu.x_t.device() == wf::cuda_test::gpu());
  CHECK(wf::cuda_test::mismatch(gpu.x_t, cpu.x_t, f32) == "");
  CHECK(wf::cuda_test::mismatch(gpu.x_t_host_times, cpu.x_t, f32) == "");
  CHECK(wf::cuda_test::mismatch(gpu.model_times, cpu.model_times, f32) == "");
  CHECK(wf::cuda_test::mismatch(gpu.loss, cpu.loss, f32) == "");
  REQUIRE(gpu.loss_and_grads.size() == cpu.loss_and_grads.size());
  for (std::size_t i = 0; i < cpu.loss_and_grads.size(); ++i) {
    CAPTURE(i);  // the loss, the prediction's gradient, the variance's
    CHECK(wf::cuda_test::mismatch(gpu.loss_and_grads[i], cpu.loss_and_grads[i], f32) == "");
  }
}

TEST_CASE("cuda: tiny GPT and LLaMA logits match the CPU", "[cuda][models]") {
  const std::string kind = GENERATE("gpt", "llama");
  const DType compute = GENERATE(DType::f32, DType::bf16);
  INFO(kind << ", computing in " << wf::dtype_name(compute));
  const auto logits = [&](Device device) {
    const std::unique_ptr<wf::models::DecoderLM> model = wf::parity::tiny_decoder(kind);
    if (compute != DType::f32) model->set_compute_dtype(compute);
    return wf::parity::decoder_logits(*model, device);
  };
  const Tensor gpu = logits(wf::cuda_test::gpu());
  CHECK(gpu.device() == wf::cuda_test::gpu());
  CHECK(wf::cuda_test::mismatch(gpu, logits(Device::cpu()), wf::cuda_test::op_tolerance(compute)) == "");
}

TEST_CASE("cuda: tiny GPT and LLaMA losses, gradients and one AdamW step match the CPU", "[cuda][models]") {
  const std::string kind = GENERATE("gpt", "llama");
  const DType compute = GENERATE(DType::f32, DType::bf16);
  const bool packed = GENERATE(false, true);  // packed documents: per-row RoPE positions, document bounds
  INFO(kind << (packed ? ", packed documents" : ""));
  check_model_runs(decoder_run(kind, compute, wf::cuda_test::gpu(), packed),
                   decoder_run(kind, compute, Device::cpu(), packed), compute);
}

TEST_CASE("cuda: a tiny DiT's loss, gradients and one AdamW step match the CPU", "[cuda][models][dit]") {
  const DType compute = GENERATE(DType::f32, DType::bf16);
  check_model_runs(dit_run(compute, wf::cuda_test::gpu()), dit_run(compute, Device::cpu()), compute);
}
