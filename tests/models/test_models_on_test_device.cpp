// The models' own arithmetic (diffusion noising and L_vb, the timestep embedding, row selection,
// the sampler's clamp) on the test device (Device::test(): its memory faults on any host touch
// outside its kernels) against the CPU, bit for bit; then tiny DiT, GPT and LLaMA models with
// parameters and inputs on the test device against the CPU: DiT's loss and the decoders' logits,
// and every model's gradients, bit for bit. The computations are tests/support/model_cases.cpp
// (tests/cuda/test_models_on_cuda.cpp runs them on a GPU).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "support/model_cases.h"
#include "wallfacer/models/diffusion.h"

using namespace wf;
using namespace wf::models;

namespace {

// The same dtype, shape and bytes (b may live on any device).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.dtype() == hb.dtype() && ha.shape() == hb.shape() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

// Loss and gradients of fresh tiny GPT and LLaMA models on the test device and on the CPU,
// compared bitwise, unpacked and with packed documents.
void check_decoders_on_test_device() {
  for (const std::string kind : {"gpt", "llama"}) {
    for (const bool packed : {false, true}) {  // packed: per-row positions (RoPE) and document bounds
      INFO(kind << (packed ? ", packed documents" : ""));
      const auto cpu = wf::parity::decoder_loss(*wf::parity::tiny_decoder(kind), Device::cpu(), packed);
      const auto dev = wf::parity::decoder_loss(*wf::parity::tiny_decoder(kind), Device::test(), packed);
      for (const auto& [name, t] : cpu) {
        INFO(name);
        CHECK(same_bits(dev.at(name), t));
      }
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
  CHECK(same_bits(wf::parity::timestep_embedding_on(Device::test()), wf::parity::timestep_embedding_on(Device::cpu())));
  const Tensor selected = wf::parity::selected_rows_on(Device::test());
  CHECK(selected.device() == Device::test());
  CHECK(same_bits(selected, wf::parity::selected_rows_on(Device::cpu())));
}

TEST_CASE("test device: diffusion noising, the loss with L_vb and its gradient match the CPU bitwise",
          "[models][testdev]") {
  for (const DiffusionKind kind : {DiffusionKind::ddpm, DiffusionKind::flow}) {
    INFO(diffusion_kind_name(kind));
    const wf::parity::DiffusionRun cpu = wf::parity::diffusion_run(kind, Device::cpu());
    const wf::parity::DiffusionRun dev = wf::parity::diffusion_run(kind, Device::test());
    CHECK(dev.x_t.device() == Device::test());
    CHECK(same_bits(dev.x_t, cpu.x_t));
    CHECK(same_bits(dev.x_t_host_times, cpu.x_t));  // the host-times overload
    CHECK(same_bits(cpu.x_t_host_times, cpu.x_t));
    CHECK(same_bits(dev.model_times, cpu.model_times));
    CHECK(same_bits(dev.loss, cpu.loss));
  }
}

TEST_CASE("test device: the diffusion loss's gradients match the CPU bitwise", "[models][testdev]") {
  for (const DiffusionKind kind : {DiffusionKind::ddpm, DiffusionKind::flow}) {
    INFO(diffusion_kind_name(kind));
    const std::vector<Tensor> cpu = wf::parity::diffusion_run(kind, Device::cpu()).loss_and_grads;
    const std::vector<Tensor> dev = wf::parity::diffusion_run(kind, Device::test()).loss_and_grads;
    for (std::size_t i = 0; i < cpu.size(); ++i) CHECK(same_bits(dev[i], cpu[i]));
  }
}

TEST_CASE("test device: the DDIM sampler with clipping matches the CPU bitwise", "[models][testdev]") {
  const Tensor on_dev = wf::parity::ddim_sample_on(Device::test());
  CHECK(on_dev.device() == Device::test());
  CHECK(same_bits(on_dev, wf::parity::ddim_sample_on(Device::cpu())));
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
