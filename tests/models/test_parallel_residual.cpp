// The parallel-residual family with QK-norm (models/parallel_residual/), built through the
// registry as a user would: its parameters, its gradients against central differences, and its
// logits, loss and every gradient against the same block written out in plain ops
// (out = x + attn(norm(x)) + mlp(norm(x)), q and k normalised per head before RoPE), with and
// without the attention-output checkpoint. Its layouts: tests/dist/test_train_parity*.cpp and
// test_pipeline_parity.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/model_testing.h"
#include "nn/module_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/ops/ops.h"

using wf::DType;
using wf::Tensor;
using wf::models::testing::positions_of;
using wf::models::testing::random_ids;

namespace {

constexpr std::int64_t kVocab = 40, kHeads = 4, kWidth = 16, kHeadDim = kWidth / kHeads;

std::shared_ptr<wf::models::DecoderLM> build(bool checkpoint, const std::string& norm = "layernorm") {
  wf::comm::Runtime::init();  // a world of one
  wf::config::RunConfig config;
  config.model.set_name("parallel_residual");
  config.model.set("n_layer", 2);
  config.model.set("n_head", kHeads);
  config.model.set("d_model", kWidth);
  config.model.set("d_ff", 24);
  config.model.set("vocab_size", kVocab);
  config.model.set("max_seq_len", 16);
  config.model.set("norm", norm);
  config.model.set("init_std", 0.3);  // away from the linear range of softmax, GELU and the norms
  config.model.set("checkpoint_attention", checkpoint);
  config.train.seed = 5;
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), 1, 0));
  auto model = std::dynamic_pointer_cast<wf::models::DecoderLM>(wf::models::create(config, grid));
  REQUIRE(model != nullptr);
  model->to(DType::f64);
  return model;
}

// The model's loss written out in ops, on its own parameters (so their gradients compare).
Tensor plain_loss(const wf::models::DecoderLM& model, const Tensor& ids, const Tensor& targets) {
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : model.named_parameters()) p[name] = t;
  const auto norm = [&](const Tensor& x, const std::string& name) {
    return wf::layer_norm(x, p.at(name + ".weight"), p.at(name + ".bias"), 1e-5);
  };
  const auto heads = [](const Tensor& t) { return wf::permute(t, {0, 2, 1, 3}); };  // [B, h, T, hd]
  const std::int64_t B = ids.size(0), T = ids.size(1);
  std::vector<double> mask(static_cast<std::size_t>(T * T), 0.0);
  for (std::int64_t i = 0; i < T; ++i) {
    for (std::int64_t j = i + 1; j < T; ++j) mask[static_cast<std::size_t>(i * T + j)] = -1e30;  // causal
  }
  const Tensor causal = Tensor::from_vector(mask, {T, T});
  Tensor x = wf::embedding(ids, p.at("token_embedding.weight"));
  for (int b = 0; b < 2; ++b) {
    const std::string block = "blocks." + std::to_string(b) + ".";
    const Tensor h = norm(x, block + "norm");
    // qkv rows per head: its query, key and value (n_kv_head = n_head).
    const Tensor qkv = wf::reshape(wf::linear(h, p.at(block + "attn.qkv.weight"), p.at(block + "attn.qkv.bias")),
                                   {B, T, kHeads, 3, kHeadDim});
    const auto part = [&](int i) { return wf::reshape(wf::narrow(qkv, 3, i, 1), {B, T, kHeads, kHeadDim}); };
    const Tensor q = wf::rope(norm(part(0), block + "q_norm"), positions_of(T), 10000.0);
    const Tensor k = wf::rope(norm(part(1), block + "k_norm"), positions_of(T), 10000.0);
    const Tensor scores = wf::add(wf::scale(wf::matmul(heads(q), heads(k), false, true), 1.0 / std::sqrt(kHeadDim)),
                                  causal);
    const Tensor attended = wf::reshape(heads(wf::matmul(wf::softmax(scores, -1), heads(part(2)))), {B, T, kWidth});
    const Tensor attn = wf::linear(attended, p.at(block + "attn.proj.weight"), p.at(block + "attn.proj.bias"));
    const Tensor mlp = wf::linear(wf::gelu(wf::linear(h, p.at(block + "mlp.fc.weight"), p.at(block + "mlp.fc.bias"))),
                                  p.at(block + "mlp.proj.weight"), p.at(block + "mlp.proj.bias"));
    x = wf::add(wf::add(x, attn), mlp);
  }
  const Tensor logits = wf::matmul(norm(x, "final_norm"), p.at("token_embedding.weight"), false, true);
  return wf::cross_entropy(logits, targets);
}

}  // namespace

TEST_CASE("parallel_residual: one norm per block, QK-norms of head_dim, RoPE and no position table", "[models]") {
  const auto model = build(false);
  CHECK(model->name() == "parallel_residual");
  const auto state = model->state_dict();
  for (const char* name : {"blocks.0.norm.weight", "blocks.0.q_norm.weight", "blocks.0.k_norm.bias",
                           "blocks.1.attn.qkv.weight", "blocks.1.mlp.fc.weight", "final_norm.weight"}) {
    INFO(name);
    CHECK(state.contains(name));
  }
  CHECK(state.at("blocks.0.q_norm.weight").shape() == wf::Shape{kHeadDim});
  CHECK_FALSE(state.contains("blocks.0.norm2.weight"));
  CHECK_FALSE(state.contains("position_embedding.weight"));
}

TEST_CASE("parallel_residual: logits, loss and every gradient equal the block written out in ops", "[models]") {
  for (const bool checkpoint : {false, true}) {
    INFO("checkpoint at the attention output: " << checkpoint);
    const auto model = build(checkpoint);
    const Tensor ids = random_ids(2, 7, kVocab, 3), targets = random_ids(2, 7, kVocab, 4);
    const Tensor expected = plain_loss(*model, ids, targets);
    wf::autograd::backward({expected});
    const auto reference_grads = wf::models::testing::grads_by_name(*model);
    model->zero_grad();
    const Tensor loss = model->loss(ids, targets);
    CHECK(std::abs(loss.item() - expected.item()) <= 1e-12 * std::abs(expected.item()));
    wf::autograd::backward({loss});
    for (const auto& [name, t] : model->named_parameters()) {
      INFO(name);
      const Tensor& want = reference_grads.at(name);
      double largest = 0;
      for (const double g : want.to_vector<double>()) largest = std::max(largest, std::abs(g));
      CHECK(wf::nn::testing::max_abs_diff(t.grad(), want) <= 1e-10 * largest + 1e-15);
    }
  }
}

TEST_CASE("parallel_residual: gradients of every parameter match central differences in f64 (RMSNorm)", "[models]") {
  const auto model = build(false, "rmsnorm");
  const Tensor ids = random_ids(2, 5, kVocab, 2);
  wf::nn::testing::check_module_gradients(*model, [&](const Tensor& x) { return model->forward(x); }, ids);
}
