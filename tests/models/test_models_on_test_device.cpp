// The models' own arithmetic (diffusion noising and L_vb, the timestep embedding, row selection,
// the sampler's clamp) on the test device (Device::test(): its memory faults on any host touch
// outside its kernels) against the CPU, bit for bit; then tiny DiT, GPT and LLaMA models with
// parameters and inputs on the test device against the CPU: DiT's loss and the decoders' logits,
// and every model's gradients, bit for bit. The tiny models are tests/support/model_cases.cpp
// (tests/cuda/test_models_on_cuda.cpp runs them on a GPU).
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "models/model_testing.h"
#include "support/model_cases.h"
#include "wallfacer/models/diffusion.h"
#include "wallfacer/nn/sincos_position.h"
#include "wallfacer/nn/timestep_embedder.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::models;

namespace {

// The same dtype, shape and bytes (b may live on any device).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

Tensor on_test(const Tensor& t) { return t.to(Device::test()); }

// Loss and gradients of fresh tiny GPT and LLaMA models on the test device and on the CPU,
// compared bitwise.
void check_decoders_on_test_device() {
  for (const std::string kind : {"gpt", "llama"}) {
    INFO(kind);
    const auto cpu = wf::parity::decoder_loss(*wf::parity::tiny_decoder(kind), Device::cpu());
    const auto dev = wf::parity::decoder_loss(*wf::parity::tiny_decoder(kind), Device::test());
    for (const auto& [name, t] : cpu) {
      INFO(name);
      CHECK(same_bits(dev.at(name), t));
    }
  }
}

}  // namespace

TEST_CASE("test device: tiny GPT and LLaMA logits match the CPU bitwise", "[models][testdev]") {
  for (const std::string kind : {"gpt", "llama"}) {
    INFO(kind);
    const auto logits = [&](Device device) {
      return wf::parity::decoder_logits(*wf::parity::tiny_decoder(kind), device);
    };
    CHECK(same_bits(logits(Device::test()), logits(Device::cpu())));
  }
}

// Hidden until ops' count_targets (a host loop over the targets, called by DecoderLM's loss) and
// the autograd engine's gradient accumulation run on the device.
TEST_CASE("test device: tiny GPT and LLaMA losses and gradients match the CPU bitwise",
          "[models][testdev]") {
  check_decoders_on_test_device();
}

TEST_CASE("test device: the timestep embedding and row selection match the CPU bitwise", "[models][testdev]") {
  const Tensor t = Tensor::from_vector(std::vector<double>{0, 17, 999, 250.5}, {4});
  CHECK(same_bits(nn::timestep_frequency_embedding(on_test(t), 256), nn::timestep_frequency_embedding(t, 256)));
  const Tensor x = Tensor::randn_at({2, 9, 4}, 5, 0);
  const Tensor positions = Tensor::from_vector(std::vector<std::int64_t>{8, 0, 4}, {3});
  const Tensor selected = nn::select_rows(on_test(x), on_test(positions));
  CHECK(selected.device() == Device::test());
  CHECK(same_bits(selected, nn::select_rows(x, positions)));
}

TEST_CASE("test device: diffusion noising, the loss with L_vb and its gradient match the CPU bitwise",
          "[models][testdev]") {
  const Shape shape = {3, 2, 4, 4};
  const Tensor x0 = Tensor::randn_at(shape, 1, 0), noise = Tensor::randn_at(shape, 2, 0);
  for (const DiffusionKind kind : {DiffusionKind::ddpm, DiffusionKind::flow}) {
    INFO(diffusion_kind_name(kind));
    const bool learn_sigma = kind == DiffusionKind::ddpm;
    const Diffusion diffusion({.kind = kind, .learn_sigma = learn_sigma});
    const std::vector<double> host_times =
        kind == DiffusionKind::ddpm ? std::vector<double>{0, 1, 999} : std::vector<double>{0.0, 0.5, 0.97};
    const Tensor times = Tensor::from_vector(host_times, {3});
    const Tensor x_t = diffusion.noised(x0, noise, times);
    const Tensor x_t_dev = diffusion.noised(on_test(x0), on_test(noise), on_test(times));
    CHECK(x_t_dev.device() == Device::test());
    CHECK(same_bits(x_t_dev, x_t));
    CHECK(same_bits(diffusion.noised(x0, noise, host_times), x_t));  // the host-times overload
    CHECK(same_bits(diffusion.model_times(on_test(times)), diffusion.model_times(times)));

    const Tensor target = diffusion.target(x0, noise);
    const Tensor prediction = Tensor::randn_at(shape, 3, 0), variance = wf::tanh(Tensor::randn_at(shape, 4, 0));
    const auto loss_on = [&](Device device) {
      return diffusion.loss_sum(prediction.to(device), learn_sigma ? variance.to(device) : Tensor(), target.to(device),
                                x0.to(device), x_t.to(device), times.to(device));
    };
    CHECK(same_bits(loss_on(Device::test()), loss_on(Device::cpu())));
  }
}

TEST_CASE("test device: the diffusion loss's gradients match the CPU bitwise", "[models][testdev]") {
  const Shape shape = {3, 2, 4, 4};
  const Tensor x0 = Tensor::randn_at(shape, 1, 0), noise = Tensor::randn_at(shape, 2, 0);
  for (const DiffusionKind kind : {DiffusionKind::ddpm, DiffusionKind::flow}) {
    INFO(diffusion_kind_name(kind));
    const bool learn_sigma = kind == DiffusionKind::ddpm;
    const Diffusion diffusion({.kind = kind, .learn_sigma = learn_sigma});
    const Tensor times = Tensor::from_vector(
        kind == DiffusionKind::ddpm ? std::vector<double>{0, 1, 999} : std::vector<double>{0.0, 0.5, 0.97}, {3});
    const Tensor x_t = diffusion.noised(x0, noise, times), target = diffusion.target(x0, noise);
    const auto loss_and_grads = [&](Device device) {
      Tensor prediction = Tensor::randn_at(shape, 3, 0).to(device), variance;
      prediction.set_requires_grad(true);
      if (learn_sigma) {
        variance = wf::tanh(Tensor::randn_at(shape, 4, 0)).to(device);
        variance.set_requires_grad(true);
      }
      const Tensor loss = diffusion.loss_sum(prediction, variance, target.to(device), x0.to(device), x_t.to(device),
                                             times.to(device));
      loss.backward();
      return std::vector<Tensor>{loss, prediction.grad(), learn_sigma ? variance.grad() : Tensor::zeros({1})};
    };
    const std::vector<Tensor> cpu = loss_and_grads(Device::cpu()), dev = loss_and_grads(Device::test());
    for (std::size_t i = 0; i < cpu.size(); ++i) CHECK(same_bits(dev[i], cpu[i]));
  }
}

TEST_CASE("test device: the DDIM sampler with clipping matches the CPU bitwise", "[models][testdev]") {
  const Diffusion diffusion({});
  const Tensor noise = Tensor::randn_at({2, 1, 4, 4}, 6, 0);
  // A denoiser that overshoots, so the clamp to [−1, 1] bites.
  const Diffusion::Denoiser model = [](const Tensor& x, const std::vector<double>&) { return scale(x, -3.0); };
  const Tensor on_cpu = diffusion.sample(model, noise, 4, true);
  const Tensor on_dev = diffusion.sample(model, on_test(noise), 4, true);
  CHECK(on_dev.device() == Device::test());
  CHECK(same_bits(on_dev, on_cpu));
}

TEST_CASE("test device: a tiny DiT's loss matches the CPU bitwise", "[models][testdev]") {
  CHECK(same_bits(wf::parity::dit_loss(*wf::parity::tiny_dit(), Device::test(), false).at("loss"),
                  wf::parity::dit_loss(*wf::parity::tiny_dit(), Device::cpu(), false).at("loss")));
}

TEST_CASE("test device: a tiny DiT's gradients match the CPU bitwise", "[models][testdev]") {
  const auto cpu = wf::parity::dit_loss(*wf::parity::tiny_dit(), Device::cpu(), true);
  const auto dev = wf::parity::dit_loss(*wf::parity::tiny_dit(), Device::test(), true);
  for (const auto& [name, t] : cpu) {
    INFO(name);
    CHECK(same_bits(dev.at(name), t));
  }
}
