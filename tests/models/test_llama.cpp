// The LLaMA model and what every DecoderLM shares: parameter names and counts, gradients against
// central differences, the loss sum and count with ignored targets, stages that are bit for bit
// the matching part of the whole model, checkpointing at the attention output, the registry and
// its config keys, and generation through the Model interface. The PyTorch comparison is in
// test_decoder_reference.cpp; layouts across processes in tests/dist/test_train_parity.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "nn/module_testing.h"
#include "models/model_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/models/generate.h"
#include "wallfacer/models/gpt.h"
#include "wallfacer/models/llama.h"
#include "wallfacer/ops/ops.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::models::DecoderLM;
using wf::models::DecoderOptions;
using wf::models::Llama;
using wf::models::LlamaOptions;
using wf::models::token_batch;
using wf::nn::testing::max_abs_diff;

using wf::models::testing::grads_by_name;
using wf::models::testing::positions_of;
using wf::models::testing::random_ids;

namespace {

LlamaOptions tiny_llama(std::uint64_t seed = 3) {
  return {.vocab_size = 40, .max_seq_len = 16, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .d_model = 16, .d_ff = 24,
          .rope_theta = 500.0, .seed = seed};
}

}  // namespace

TEST_CASE("llama: names, shapes and LLaMA's choices (SwiGLU, RMSNorm, RoPE, no biases, untied)", "[models]") {
  Llama model(tiny_llama());
  CHECK(model.name() == "llama");
  const auto state = model.state_dict();
  for (const char* name : {"token_embedding.weight", "blocks.0.norm1.weight", "blocks.0.attn.qkv.weight",
                           "blocks.0.attn.proj.weight", "blocks.3.mlp.gate.weight", "blocks.3.mlp.up.weight",
                           "blocks.3.mlp.down.weight", "final_norm.weight", "lm_head.weight"}) {
    INFO(name);
    CHECK(state.contains(name));
  }
  for (const auto& [name, t] : state) {
    INFO(name);
    CHECK_FALSE(name.ends_with(".bias"));  // no biases, and RMSNorm has none
  }
  CHECK_FALSE(state.contains("position_embedding.weight"));
  CHECK(state.at("blocks.0.attn.qkv.weight").shape() == wf::Shape{(4 + 2 * 2) * 4, 16});  // 4 q + 2·2 kv heads of 4
  CHECK(state.at("blocks.0.mlp.gate.weight").shape() == wf::Shape{24, 16});
  CHECK(state.at("blocks.0.mlp.down.weight").shape() == wf::Shape{16, 24});
  const Tensor logits = model.forward(random_ids(2, 6, 40, 1));
  CHECK(logits.shape() == wf::Shape{2, 6, 40});
}

TEST_CASE("decoders: the parameter count formula equals the built model's, biases and heads included", "[models]") {
  std::vector<DecoderOptions> variants;
  DecoderOptions gpt{.vocab_size = 50, .max_seq_len = 12, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 16};
  variants.push_back(gpt);
  gpt.bias = false;
  gpt.tie_embeddings = false;
  gpt.positions = wf::models::DecoderPositions::rope;
  variants.push_back(gpt);
  gpt.norm = wf::nn::NormType::rms_norm;
  gpt.feed_forward = wf::nn::FeedForwardKind::swiglu;
  gpt.bias = true;
  variants.push_back(gpt);
  variants.push_back(wf::models::llama_decoder_options(tiny_llama()));
  for (const DecoderOptions& o : variants) {
    DecoderLM model("decoder", o);
    CHECK(wf::models::decoder_parameter_count(o) == static_cast<double>(model.num_parameters()));
  }
}

TEST_CASE("llama: gradients of every parameter match central differences in f64", "[models]") {
  LlamaOptions o = tiny_llama(5);
  o.n_layer = 2;
  o.init_std = 0.3;  // away from the linear range of softmax and SiLU
  Llama model(o);
  model.to(DType::f64);
  const Tensor ids = random_ids(2, 5, 40, 2);
  wf::nn::testing::check_module_gradients(model, [&](const Tensor& x) { return model.forward(x); }, ids);
}

TEST_CASE("decoders: loss_sum is the sum over counted targets; ignored targets count nowhere", "[models]") {
  Llama model(tiny_llama());
  const Tensor ids = random_ids(2, 8, 40, 4);
  Tensor targets = random_ids(2, 8, 40, 5);
  std::int64_t* t = targets.data<std::int64_t>();
  t[0] = t[3] = t[9] = -100;
  const wf::models::LossSum loss = model.loss_sum(token_batch(ids, targets, positions_of(8)));
  CHECK(loss.count.item() == 13);
  // The mean over the 13 counted targets, times 13 (the old loss_sum multiplied by all 16).
  const double mean = wf::cross_entropy(model.forward(ids), targets).item();
  CHECK(loss.sum.item() == Approx(13 * mean).epsilon(1e-6));
  // All ignored: zero loss, zero count.
  const Tensor none = Tensor::full({2, 8}, -100.0, DType::i64);
  const wf::models::LossSum empty = model.loss_sum(token_batch(ids, none, positions_of(8)));
  CHECK(empty.count.item() == 0);
  CHECK(empty.sum.item() == 0.0);
  CHECK_THROWS_WITH(model.loss_sum(wf::models::Batch().set("tokens", ids)),
                    Contains("needs a tensor 'positions'") && Contains("holds only tokens"));
}

TEST_CASE("decoders: stages hold the whole model's weights bit for bit and chain to its loss and gradients",
          "[models]") {
  for (const bool tied : {false, true}) {
    LlamaOptions lo = tiny_llama(9);
    lo.tie_embeddings = tied;
    const DecoderOptions whole_options = wf::models::llama_decoder_options(lo);
    Llama whole(whole_options);
    // Three stages: embedding + blocks [0, 1), blocks [1, 3), blocks [3, 4) + head.
    std::vector<wf::models::StageRange> ranges = {{{{0, 1}}, true, false}, {{{1, 3}}, false, false}, {{{3, 4}}, false, true}};
    std::vector<std::unique_ptr<Llama>> stages;
    for (const auto& range : ranges) {
      DecoderOptions o = whole_options;
      o.stage = range;
      stages.push_back(std::make_unique<Llama>(o));
    }
    INFO((tied ? "tied" : "untied") << " head");
    const auto full_state = whole.state_dict();
    std::size_t stage_entries = 0;
    for (const auto& stage : stages) {
      CHECK_FALSE(stage->has_logits());
      for (const auto& [name, t] : stage->state_dict()) {
        INFO(name);
        REQUIRE(full_state.contains(name));
        CHECK(max_abs_diff(t, full_state.at(name)) == 0.0);
        ++stage_entries;
      }
    }
    // Every weight is in exactly one stage, except a tied head's copy of the embedding.
    CHECK(stage_entries == full_state.size() + (tied ? 1 : 0));
    CHECK(stages[1]->state_dict().contains("blocks.1.attn.qkv.weight"));
    CHECK(stages[1]->state_dict().contains("blocks.2.mlp.down.weight"));
    CHECK_FALSE(stages[1]->state_dict().contains("blocks.0.attn.qkv.weight"));

    const Tensor ids = random_ids(2, 8, 40, 10), targets = random_ids(2, 8, 40, 11);
    const auto batch = token_batch(ids, targets, positions_of(8));
    const wf::models::LossSum expected = whole.loss_sum(batch);
    wf::autograd::backward({expected.sum});
    wf::models::StageOutput out = stages[0]->forward_stage(batch, Tensor());
    out = stages[1]->forward_stage(batch, out.hidden);
    out = stages[2]->forward_stage(batch, out.hidden);
    CHECK(out.loss.count.item() == expected.count.item());
    CHECK(out.loss.sum.item() == expected.sum.item());
    wf::autograd::backward({out.loss.sum});
    const auto whole_grads = grads_by_name(whole);
    for (const auto& stage : stages) {
      for (const auto& [name, p] : stage->named_parameters()) {
        INFO(name);
        if (tied && name == "token_embedding.weight") continue;  // each copy holds part of the gradient
        CHECK(max_abs_diff(p.grad(), whole_grads.at(name)) == 0.0);
      }
    }
    if (tied) {  // the two copies' gradients add up to the whole model's
      const Tensor sum = wf::add(stages[0]->token_embedding().weight().grad(), stages[2]->token_embedding().weight().grad());
      CHECK(max_abs_diff(sum, whole_grads.at("token_embedding.weight")) <= 1e-6);
    }
  }
  DecoderOptions bad = wf::models::llama_decoder_options(tiny_llama());
  bad.stage = {{{3, 9}}, false, true};
  CHECK_THROWS_WITH(Llama(bad), Contains("the stage's chunk 0 of blocks [3, 9) is not inside the model's 4 blocks"));
}

TEST_CASE("llama: checkpointing at the attention output leaves every gradient unchanged", "[models]") {
  LlamaOptions plain = tiny_llama(12);
  LlamaOptions checkpointed = plain;
  checkpointed.checkpoint_attention = true;
  Llama a(plain), b(checkpointed);
  const auto batch = token_batch(random_ids(2, 12, 40, 8), random_ids(2, 12, 40, 9), positions_of(12));
  wf::autograd::backward({a.loss_sum(batch).sum});
  wf::autograd::backward({b.loss_sum(batch).sum});
  const auto ga = grads_by_name(a), gb = grads_by_name(b);
  for (const auto& [name, g] : ga) {
    INFO(name);
    CHECK(max_abs_diff(g, gb.at(name)) <= 1e-6 * (1.0 + max_abs_diff(g, Tensor::zeros(g.shape()))));
  }
}

TEST_CASE("llama: the registry builds it from its own config keys; facts match the model", "[models]") {
  wf::comm::Runtime::init();
  wf::config::RunConfig config;
  config.model.set_name("llama");
  config.model.set("n_layer", 2);
  config.model.set("d_model", 32);
  config.model.set("n_head", 4);
  config.model.set("n_kv_head", 1);
  config.model.set("d_ff", 48);
  config.model.set("vocab_size", 256);
  config.model.set("max_seq_len", 64);
  config.model.set("rope_theta", 250000.0);
  config.train.seq_len = 64;
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(config.parallel.grid(), 1, 0));
  const auto model = wf::models::create(config, grid);
  auto* llama = dynamic_cast<Llama*>(model.get());
  REQUIRE(llama != nullptr);
  CHECK(llama->options().rope_theta == 250000.0);
  CHECK(llama->options().n_kv_head == 1);
  CHECK(llama->options().feed_forward == wf::nn::FeedForwardKind::swiglu);
  const wf::config::ModelFacts facts = wf::config::model_facts(config);
  CHECK(facts.parameters == static_cast<double>(model->num_parameters()));
  CHECK(facts.train_flops_per_token == model->train_flops_per_token(64));
  CHECK(facts.causal);
  config.data.source = wf::config::DataSource::synthetic;  // validate reads no data files then
  CHECK_NOTHROW(wf::config::validate(config, 1));
  // The config round-trips through YAML with LLaMA's keys.
  CHECK(wf::config::parse_config(wf::config::to_yaml(config)) == config);
  CHECK_THROWS_WITH(config.model.set("positions", "rope"), Contains("unknown key 'model.positions'"));
}

TEST_CASE("decoders: generate serves any model with logits and names one without", "[models]") {
  Llama model(tiny_llama());
  std::vector<std::uint32_t> streamed;
  const auto tokens = wf::models::generate(model, {1, 2, 3}, {.max_new_tokens = 20, .seed = 5},
                                           [&](std::uint32_t id) { streamed.push_back(id); });
  CHECK(tokens.size() == 23);
  CHECK(std::equal(streamed.begin(), streamed.end(), tokens.begin() + 3));
  CHECK(tokens == wf::models::generate(model, {1, 2, 3}, {.max_new_tokens = 20, .seed = 5}));
  for (auto id : tokens) CHECK(id < 40u);
  // Past max_seq_len (16) the context is cropped to the last 16 tokens.
  CHECK(wf::models::generate(model, {1}, {.max_new_tokens = 30}).size() == 31);

  DecoderOptions stage_options = wf::models::llama_decoder_options(tiny_llama());
  stage_options.stage = {{{0, 2}}, true, false};
  Llama stage(stage_options);
  CHECK_THROWS_WITH(wf::models::generate(stage, {1}, {}), Contains("model 'llama' does not predict tokens"));
}

TEST_CASE("llama: bf16 mixed precision computes in bf16 over f32 masters and f32 gradients", "[models][bf16]") {
  LlamaOptions o = tiny_llama();
  o.d_model = 64;
  o.d_ff = 96;
  o.max_seq_len = 32;
  Llama f32_model(o), bf16_model(o);
  bf16_model.set_compute_dtype(DType::bf16);
  wf::models::testing::check_mixed_precision_matches_f32(f32_model, bf16_model, random_ids(3, 32, 40, 7),
                                                         random_ids(3, 32, 40, 8));
}
