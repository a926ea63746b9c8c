// The GPT model definition: shapes, names, options, the loss the trainer uses, the FLOP count,
// the registry and sampling. Cross-process behaviour is in tests/dist/test_train_parity.cpp,
// and the comparison with PyTorch in tests/reference/.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "models/model_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/models/generate.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/ops/ops.h"
#include "wallfacer/train/optimizer.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::models::Gpt;
using wf::models::GptOptions;

using wf::models::testing::positions_of;
using wf::models::testing::random_ids;

namespace {

GptOptions tiny(std::uint64_t seed = 7) {
  return {.vocab_size = 32, .max_seq_len = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 0, .d_model = 16, .seed = seed};
}


double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Parameter gradients of loss_sum on one batch, by name.
std::map<std::string, Tensor> gradients(Gpt& model, const Tensor& ids, const Tensor& targets) {
  model.zero_grad();
  const Tensor positions = Tensor::arange(0, static_cast<double>(ids.size(1)), 1, DType::i64);
  wf::autograd::backward({model.loss_sum(wf::models::token_batch(ids, targets, positions)).sum});
  return wf::models::testing::grads_by_name(model);
}

}  // namespace

TEST_CASE("gpt: logits shape, parameter names, tied and untied heads", "[models]") {
  Gpt model(tiny());
  const Tensor ids = random_ids(2, 5, 32, 1);
  const Tensor logits = model.forward(ids);
  CHECK(logits.shape() == wf::Shape{2, 5, 32});
  CHECK(max_abs_diff(logits, model.forward(ids, Tensor::arange(0, 5, 1, DType::i64))) == 0.0);

  const auto state = model.state_dict();
  for (const char* name : {"token_embedding.weight", "position_embedding.weight", "blocks.0.norm1.weight",
                           "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.1.mlp.fc.weight",
                           "final_norm.weight", "final_norm.bias"}) {
    INFO(name);
    CHECK(state.contains(name));
  }
  CHECK_FALSE(state.contains("lm_head.weight"));

  GptOptions untied = tiny();
  untied.tie_embeddings = false;
  Gpt untied_model(untied);
  CHECK(untied_model.state_dict().contains("lm_head.weight"));
  CHECK(untied_model.num_parameters() == model.num_parameters() + 32 * 16);

  GptOptions rope = tiny();
  rope.positions = wf::models::GptPositions::rope;
  rope.norm = wf::nn::NormType::rms_norm;
  rope.n_kv_head = 2;
  Gpt rope_model(rope);
  CHECK_FALSE(rope_model.state_dict().contains("position_embedding.weight"));
  CHECK_FALSE(rope_model.state_dict().contains("final_norm.bias"));
  CHECK(rope_model.forward(ids).shape() == wf::Shape{2, 5, 32});
}

TEST_CASE("gpt: the tied embedding receives gradient from both the lookup and the head", "[models]") {
  GptOptions o = tiny();
  o.vocab_size = 64;
  Gpt model(o);
  const Tensor ids = Tensor::from_vector<std::int64_t>({5, 6, 7, 8, 9, 10}, {2, 3});
  const Tensor loss = model.loss(ids, ids);
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == Approx(std::log(64.0)).epsilon(0.05));  // small init: near-uniform predictions
  loss.backward();
  const Tensor grad = model.token_embedding().weight().grad();
  REQUIRE(grad.defined());
  CHECK(std::abs(grad.at({0, 0})) > 0.0);  // id 0 never occurs: only the head reaches its row
  CHECK(std::abs(grad.at({5, 0})) > 0.0);
}

TEST_CASE("gpt: the same seed gives the same weights; positions beyond max_seq_len are an error", "[models]") {
  Gpt a(tiny(3)), b(tiny(3)), c(tiny(4));
  const Tensor ids = random_ids(1, 4, 32, 2);
  CHECK(max_abs_diff(a.forward(ids), b.forward(ids)) == 0.0);
  CHECK(max_abs_diff(a.forward(ids), c.forward(ids)) > 0.0);
  CHECK_THROWS_WITH(a.forward(ids, Tensor::from_vector<std::int64_t>({0, 1, 2, 16}, {4})),
                    Contains("max_seq_len = 16"));
  CHECK_THROWS_WITH(a.forward(ids, Tensor::from_vector<std::int64_t>({0, 1, 2}, {3})), Contains("positions"));
}

TEST_CASE("gpt: loss_sum is the per-token cross-entropy summed, and the model learns", "[models]") {
  Gpt model(tiny());
  const Tensor ids = random_ids(2, 8, 32, 5), targets = random_ids(2, 8, 32, 6);
  const Tensor positions = Tensor::arange(0, 8, 1, DType::i64);
  const Tensor logits = model.forward(ids);
  // Reference: −log softmax(logits)[target], summed in f64.
  const auto l = logits.to_vector<double>();
  const auto t = targets.to_vector<double>();
  double expected = 0;
  for (std::size_t row = 0; row < t.size(); ++row) {
    double top = -1e300, total = 0;
    for (int v = 0; v < 32; ++v) top = std::max(top, l[row * 32 + v]);
    for (int v = 0; v < 32; ++v) total += std::exp(l[row * 32 + v] - top);
    expected += std::log(total) + top - l[row * 32 + static_cast<std::size_t>(t[row])];
  }
  const wf::models::LossSum sum = model.loss_sum(wf::models::token_batch(ids, targets, positions));
  CHECK(sum.count.item() == 16);
  const double got = sum.sum.item();
  CHECK(got == Approx(expected).epsilon(1e-5));

  wf::train::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  const double first = got / 16;
  double last = first;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    const Tensor loss = wf::scale(model.loss_sum(wf::models::token_batch(ids, targets, positions)).sum, 1.0 / 16);
    last = loss.item();
    wf::autograd::backward({loss});
    opt.step();
  }
  INFO("first " << first << " last " << last);
  CHECK(last < 0.5 * first);  // memorises one batch: from ~ln 32 = 3.47 to well below half
}

TEST_CASE("gpt: activation checkpointing at the attention output leaves every gradient unchanged", "[models]") {
  for (bool rope : {false, true}) {
    GptOptions plain = tiny(11);
    plain.n_kv_head = 2;
    if (rope) plain.positions = wf::models::GptPositions::rope;
    GptOptions checkpointed = plain;
    checkpointed.checkpoint_attention = true;
    Gpt a(plain), b(checkpointed);
    const Tensor ids = random_ids(2, 12, 32, 8), targets = random_ids(2, 12, 32, 9);
    const auto ga = gradients(a, ids, targets), gb = gradients(b, ids, targets);
    for (const auto& [name, g] : ga) {
      INFO((rope ? "rope " : "learned ") << name);
      CHECK(max_abs_diff(g, gb.at(name)) <= 1e-6 * (1.0 + max_abs_diff(g, Tensor::zeros(g.shape()))));
    }
  }
}

TEST_CASE("gpt: train FLOPs per token follow 6·N + attention", "[models]") {
  // GPT-2 124M shapes: N_matmul = 12·(4·768² + 2·768·3072) + 768·50257 = 123.5M; attention
  // 12·d·(T+1)/2 per layer.
  Gpt model({.vocab_size = 50257, .max_seq_len = 1024, .n_layer = 12, .n_head = 12, .d_model = 768, .seed = 1});
  const double matmul = 12.0 * (4.0 * 768 * 768 + 2.0 * 768 * 3072) + 768.0 * 50257;
  const double expected = 6.0 * matmul + 12.0 * 12.0 * 768.0 * (1024.0 + 1.0) / 2.0;
  CHECK(model.train_flops_per_token(1024) == Approx(expected).epsilon(1e-12));
}

TEST_CASE("gpt: the registry builds models by name and lists them in errors", "[models]") {
  wf::comm::Runtime::init();  // a world of one: no mpirun needed
  wf::config::RunConfig config;
  config.model.set("n_layer", 1);
  config.model.set("d_model", 16);
  config.model.set("d_ff", 32);
  config.model.set("vocab_size", 32);
  config.model.set("max_seq_len", 16);
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), 1, 0));
  const auto model = wf::models::create(config, grid);
  CHECK(model->name() == "gpt");
  CHECK(dynamic_cast<Gpt*>(model.get()) != nullptr);
  wf::config::RunConfig misspelt = config;
  misspelt.model.name = "gtp";
  CHECK_THROWS_WITH(wf::models::create(misspelt, grid),
                    Contains("registered models are") && Contains("gpt") && Contains("did you mean 'gpt'"));
  CHECK_THROWS_WITH(wf::models::register_model(wf::models::decoder_schema("gpt", {}, wf::models::gpt_options),
                                               wf::models::make_gpt),
                    Contains("already registered"));
  const auto names = wf::models::registered_models();
  CHECK(std::find(names.begin(), names.end(), "gpt") != names.end());
}

TEST_CASE("gpt: sampling is greedy at temperature 0, respects top-k and is reproducible", "[models]") {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  CHECK(wf::models::sample_token(logits.data(), 5, 0.0, 0, 0.99) == 1);
  CHECK(wf::models::sample_token(logits.data(), 5, 1.0, 1, 0.99) == 1);
  // top-k = 2 keeps ids 1 and 3; their weights are e^2.0 and e^1.9.
  const double p1 = 1.0 / (1.0 + std::exp(-0.1));
  CHECK(wf::models::sample_token(logits.data(), 5, 1.0, 2, p1 - 1e-6) == 1);
  CHECK(wf::models::sample_token(logits.data(), 5, 1.0, 2, p1 + 1e-6) == 3);

  Gpt model(tiny());
  const std::vector<std::uint32_t> prompt = {1, 2, 3};
  const auto a = wf::models::generate(model, prompt, {.max_new_tokens = 20, .seed = 5});
  const auto b = wf::models::generate(model, prompt, {.max_new_tokens = 20, .seed = 5});
  CHECK(a.size() == 23);
  CHECK(a == b);
  CHECK(std::equal(prompt.begin(), prompt.end(), a.begin()));
  for (auto id : a) CHECK(id < 32u);
  CHECK_THROWS_WITH(wf::models::generate(model, {40}, {}), Contains("outside the model's vocabulary"));
}

TEST_CASE("gpt: pipeline stages of an interleaved layout hold their chunks and chain to the whole model",
          "[models][pipeline]") {
  wf::config::RunConfig c;
  c.model.set("n_layer", 8);
  c.parallel.pp = 2;
  c.parallel.pp_virtual = 2;
  c.parallel.pp_schedule = wf::parallel::PipelineScheduleKind::interleaved;
  // Chunk c of rank r is global stage c·2 + r: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
  using wf::models::BlockRange;
  const wf::models::StageRange first = wf::models::pipeline_stage(c, 0), last = wf::models::pipeline_stage(c, 1);
  CHECK(first.chunks == std::vector<BlockRange>{{0, 2}, {4, 6}});
  CHECK(last.chunks == std::vector<BlockRange>{{2, 4}, {6, 8}});
  CHECK((first.embedding && !first.head && !last.embedding && last.head));
  c.parallel.pp_layers = {1, 3, 3, 1};
  CHECK(wf::models::pipeline_stage(c, 0).chunks == std::vector<BlockRange>{{0, 1}, {4, 7}});
  CHECK(wf::models::pipeline_stage(c, 1).chunks == std::vector<BlockRange>{{1, 4}, {7, 8}});
  c.parallel.pp_layers = {1, 3};
  CHECK_THROWS_WITH(wf::models::pipeline_stage(c, 0), Contains("parallel.pp_layers: [1, 3] must give the blocks"));
  c.parallel.pp = 1, c.parallel.pp_virtual = 1, c.parallel.pp_layers = {};
  CHECK(wf::models::pipeline_stage(c, 0) == wf::models::StageRange{});

  // Two ranks' chunks, run in global stage order, are the whole model's forward and backward.
  GptOptions whole_options = tiny(5);
  whole_options.n_layer = 4;
  Gpt whole(whole_options);
  GptOptions o0 = whole_options, o1 = whole_options;
  o0.stage = {{{0, 1}, {2, 3}}, true, false};
  o1.stage = {{{1, 2}, {3, 4}}, false, true};
  Gpt rank0(o0), rank1(o1);
  const Tensor ids = random_ids(2, 8, 32, 3), targets = random_ids(2, 8, 32, 4);
  const auto batch = wf::models::token_batch(ids, targets, positions_of(8));
  const auto expected = whole.loss_sum(batch);
  wf::models::StageOutput out = rank0.forward_stage(batch, Tensor(), 0);
  out = rank1.forward_stage(batch, out.hidden, 0);
  out = rank0.forward_stage(batch, out.hidden, 1);
  out = rank1.forward_stage(batch, out.hidden, 1);
  CHECK(out.loss.sum.item() == expected.sum.item());
  CHECK(rank0.stage_hidden(batch).first == wf::Shape{2, 8, 16});
  CHECK(rank0.pipeline_shared_parameters() == std::vector<std::string>{"token_embedding.weight"});
  CHECK(whole.pipeline_shared_parameters().empty());
  CHECK_THROWS_WITH(rank0.forward_stage(batch, Tensor(), 2), Contains("this stage holds model chunks 0..1, not 2"));
}

TEST_CASE("gpt: bf16 mixed precision computes in bf16 over f32 masters and f32 gradients", "[models][bf16]") {
  GptOptions o = tiny();
  o.vocab_size = 64;
  o.max_seq_len = 32;
  o.d_model = 64;
  Gpt f32_model(o), bf16_model(o);
  bf16_model.set_compute_dtype(DType::bf16);
  wf::models::testing::check_mixed_precision_matches_f32(f32_model, bf16_model, random_ids(3, 32, 64, 5),
                                                         random_ids(3, 32, 64, 6));
}
