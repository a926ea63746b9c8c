// The shared tiny models (tests/support/model_cases.h).
#include "support/model_cases.h"

#include <cstdint>
#include <vector>

#include "models/model_testing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/models/llama.h"
#include "wallfacer/nn/sincos_position.h"
#include "wallfacer/nn/timestep_embedder.h"
#include "wallfacer/ops/ops.h"

namespace wf::parity {

void move_module(nn::Module& module, Device device) {
  const auto move = [&](const Tensor& t) {
    const Tensor moved = t.detach().to(device);
    t.impl()->storage = moved.impl()->storage;
    t.impl()->offset = moved.storage_offset();
  };
  for (const auto& [name, t] : module.named_parameters()) move(t);
  for (const auto& [name, t] : module.named_buffers()) move(t);
}

std::unique_ptr<models::DecoderLM> tiny_decoder(const std::string& kind) {
  if (kind == "gpt") {
    return std::make_unique<models::Gpt>(
        models::GptOptions{.vocab_size = 32, .max_seq_len = 16, .n_layer = 2, .n_head = 4, .d_model = 16, .seed = 7});
  }
  return std::make_unique<models::Llama>(models::LlamaOptions{
      .vocab_size = 40, .max_seq_len = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16, .d_ff = 24,
      .seed = 3});
}

Tensor decoder_logits(models::DecoderLM& model, Device device) {
  move_module(model, device);
  const Tensor ids = models::testing::random_ids(2, 8, model.vocab_size(), 5).to(device);
  return model.logits(ids, models::testing::positions_of(8).to(device));
}

std::map<std::string, Tensor> decoder_loss(models::DecoderLM& model, Device device, bool packed) {
  const Tensor tokens = models::testing::random_ids(2, 8, model.vocab_size(), 5);
  const Tensor targets = models::testing::random_ids(2, 8, model.vocab_size(), 6);
  move_module(model, device);
  // Packed: documents of 3, 1 and 4 tokens in row 0 and of 5 and 3 in row 1, with the positions
  // inside them.
  const Tensor positions =
      packed ? Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2}, {2, 8})
             : models::testing::positions_of(8);
  const DocumentBounds documents = packed ? DocumentBounds{{0, 3, 4, 8}, {0, 5, 8}} : DocumentBounds{};
  const models::LossSum loss = model.loss_sum(
      models::token_batch(tokens.to(device), targets.to(device), positions.to(device), documents));
  std::map<std::string, Tensor> out = {{"loss", loss.sum}};
  loss.sum.backward();
  for (const auto& [name, p] : model.named_parameters()) out[name] = p.grad();
  return out;
}

std::unique_ptr<models::Dit> tiny_dit() {
  models::DitOptions o;
  o.image_size = 8, o.in_channels = 2, o.patch_size = 2, o.d_model = 16, o.n_layer = 2, o.n_head = 2;
  o.num_classes = 5, o.learn_sigma = true, o.seed = 3;
  auto model = std::make_unique<models::Dit>(o);
  std::uint64_t offset = 0;
  for (auto& [name, p] : model->named_parameters()) {
    autograd::NoGradGuard no_grad;
    p.copy_(scale(Tensor::randn_at(p.shape(), 11, offset, p.dtype()), 0.3));
    offset += static_cast<std::uint64_t>(p.numel());
  }
  return model;
}

std::map<std::string, Tensor> dit_loss(models::Dit& model, Device device, bool backward) {
  const models::DitOptions& o = model.options();
  const Shape shape = {2, o.in_channels, o.image_size, o.image_size};
  models::Batch batch;
  batch.set("images", Tensor::randn_at(shape, 7, 0)).set("noise", Tensor::randn_at(shape, 8, 0));
  batch.set("times", Tensor::from_vector(std::vector<double>{0, 613}, {2}));
  batch.set("labels", Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2}));
  batch.set("positions", models::testing::positions_of(o.num_patches()));
  move_module(model, device);
  models::Batch on_device;
  for (const std::string key : {"images", "noise", "times", "labels", "positions"}) {
    on_device.set(key, batch.at(key).to(device));
  }
  const models::LossSum loss = model.loss_sum(on_device);
  std::map<std::string, Tensor> out = {{"loss", loss.sum}};
  if (!backward) return out;
  loss.sum.backward();
  for (const auto& [name, p] : model.named_parameters()) out[name] = p.grad();
  return out;
}

Tensor timestep_embedding_on(Device device) {
  const Tensor t = Tensor::from_vector(std::vector<double>{0, 17, 999, 250.5}, {4});
  return nn::timestep_frequency_embedding(t.to(device), 256);
}

Tensor selected_rows_on(Device device) {
  const Tensor x = Tensor::randn_at({2, 9, 4}, 5, 0);
  const Tensor positions = Tensor::from_vector(std::vector<std::int64_t>{8, 0, 4}, {3});
  return nn::select_rows(x.to(device), positions.to(device));
}

DiffusionRun diffusion_run(models::DiffusionKind kind, Device device) {
  const Shape shape = {3, 2, 4, 4};
  const Tensor x0 = Tensor::randn_at(shape, 1, 0), noise = Tensor::randn_at(shape, 2, 0);
  const bool learn_sigma = kind == models::DiffusionKind::ddpm;
  const models::Diffusion diffusion({.kind = kind, .learn_sigma = learn_sigma});
  const std::vector<double> host_times =
      learn_sigma ? std::vector<double>{0, 1, 999} : std::vector<double>{0.0, 0.5, 0.97};
  const Tensor times = Tensor::from_vector(host_times, {3});
  DiffusionRun run;
  run.x_t = diffusion.noised(x0.to(device), noise.to(device), times.to(device));
  run.x_t_host_times = diffusion.noised(x0.to(device), noise.to(device), host_times);
  run.model_times = diffusion.model_times(times.to(device));
  // The loss's inputs as the CPU makes them, so that only the loss itself runs on `device`.
  const Tensor x_t = diffusion.noised(x0, noise, times), target = diffusion.target(x0, noise);
  const Tensor prediction = Tensor::randn_at(shape, 3, 0), variance = tanh(Tensor::randn_at(shape, 4, 0));
  run.loss = diffusion.loss_sum(prediction.to(device), learn_sigma ? variance.to(device) : Tensor(), target.to(device),
                                x0.to(device), x_t.to(device), times.to(device));
  Tensor leaf_prediction = prediction.to(device), leaf_variance;
  leaf_prediction.set_requires_grad(true);
  if (learn_sigma) {
    leaf_variance = variance.to(device);
    leaf_variance.set_requires_grad(true);
  }
  const Tensor loss = diffusion.loss_sum(leaf_prediction, leaf_variance, target.to(device), x0.to(device),
                                         x_t.to(device), times.to(device));
  loss.backward();
  run.loss_and_grads = {loss, leaf_prediction.grad(), learn_sigma ? leaf_variance.grad() : Tensor::zeros({1})};
  return run;
}

Tensor ddim_sample_on(Device device) {
  const models::Diffusion diffusion({});
  const Tensor noise = Tensor::randn_at({2, 1, 4, 4}, 6, 0);
  const models::Diffusion::Denoiser model = [](const Tensor& x, const std::vector<double>&) { return scale(x, -3.0); };
  return diffusion.sample(model, noise.to(device), 4, true);
}

}  // namespace wf::parity
