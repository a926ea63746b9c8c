// The shared tiny models (tests/support/model_cases.h).
#include "support/model_cases.h"

#include <cstdint>
#include <vector>

#include "models/model_testing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/models/llama.h"
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

std::map<std::string, Tensor> decoder_loss(models::DecoderLM& model, Device device) {
  const Tensor tokens = models::testing::random_ids(2, 8, model.vocab_size(), 5);
  const Tensor targets = models::testing::random_ids(2, 8, model.vocab_size(), 6);
  move_module(model, device);
  const models::LossSum loss = model.loss_sum(
      models::token_batch(tokens.to(device), targets.to(device), models::testing::positions_of(8).to(device)));
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

}  // namespace wf::parity
