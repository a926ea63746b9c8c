// Module: names and order, state dicts, deterministic initialisation, modes, dtype conversion.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "wallfacer/models/gpt.h"
#include "nn/module_testing.h"
#include "wallfacer/nn/nn.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using namespace wf::nn;
using wf::nn::testing::max_abs_diff;

namespace {

std::vector<std::string> names_of(const std::vector<NamedTensor>& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

TransformerBlockOptions small_block(std::uint64_t seed) {
  return {.d_model = 8, .n_head = 2, .d_ff = 16, .seed = seed};
}

wf::models::GptOptions small_gpt(std::uint64_t seed) {
  return {.vocab_size = 16, .max_seq_len = 8, .n_layer = 2, .n_head = 2, .d_model = 8, .seed = seed};
}

// A module with a buffer and a nested child, to exercise the traversal order.
struct Scaled : Module {
  explicit Scaled(std::uint64_t seed) : Module(seed) {
    weight = register_parameter("weight", Tensor::ones({3}));
    steps = register_buffer("steps", Tensor::zeros({1}, DType::i64));
    inner = register_module("inner", std::make_shared<Linear>(3, 2, true, child_seed("inner")));
    offset = register_buffer("offset", Tensor::zeros({2}));
  }
  Tensor weight, steps, offset;
  std::shared_ptr<Linear> inner;
};

}  // namespace

TEST_CASE("named_parameters: dotted names in registration order, depth-first", "[nn]") {
  TransformerBlock block(small_block(1));
  CHECK(names_of(block.named_parameters()) ==
        std::vector<std::string>{"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                 "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
                                 "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"});
  const auto params = block.parameters();
  const auto named = block.named_parameters();
  REQUIRE(params.size() == named.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].is_same(named[i].second));
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
  }
  CHECK(block.num_parameters() == 2 * 8 + (8 * 24 + 24) + (8 * 8 + 8) + 2 * 8 + (8 * 16 + 16) + (16 * 8 + 8));

  wf::models::Gpt model(small_gpt(1));
  const auto model_names = names_of(model.named_parameters());
  CHECK(model_names.front() == "token_embedding.weight");
  CHECK(model_names[1] == "position_embedding.weight");
  CHECK(model_names[2] == "blocks.0.norm1.weight");
  CHECK(model_names[4] == "blocks.0.attn.qkv.weight");
  CHECK(model_names[14] == "blocks.1.norm1.weight");
  CHECK(model_names.back() == "final_norm.bias");
  CHECK(model.children().size() == 4);  // embeddings, blocks, final norm (the head is tied)
}

TEST_CASE("state_dict holds parameters then buffers of each module, depth-first", "[nn]") {
  Scaled m(3);
  CHECK(m.state_dict().keys() == std::vector<std::string>{"weight", "steps", "offset", "inner.weight", "inner.bias"});
  CHECK(names_of(m.named_buffers()) == std::vector<std::string>{"steps", "offset"});
  CHECK(names_of(m.named_parameters()) == std::vector<std::string>{"weight", "inner.weight", "inner.bias"});
  CHECK(m.state_dict().at("weight").shares_storage_with(m.weight));
}

TEST_CASE("register_* rejects empty, dotted and duplicate names", "[nn]") {
  Module m;
  m.register_parameter("w", Tensor::zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", Tensor::zeros({2})), Contains("already used"));
  CHECK_THROWS_WITH(m.register_buffer("w", Tensor::zeros({2})), Contains("already used"));
  CHECK_THROWS_WITH(m.register_module("w", std::make_shared<Module>()), Contains("already used"));
  CHECK_THROWS_WITH(m.register_parameter("a.b", Tensor::zeros({2})), Contains("contains '.'"));
  CHECK_THROWS_WITH(m.register_parameter("", Tensor::zeros({2})), Contains("empty"));
  CHECK_THROWS_WITH(m.register_parameter("ids", Tensor::zeros({2}, DType::i64)), Contains("floating"));
}

TEST_CASE("state_dict round trip: a model with another seed loads to identical outputs", "[nn]") {
  wf::models::Gpt source(small_gpt(1));
  wf::models::Gpt target(small_gpt(2));
  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 5, 7, 2, 9, 3, 0, 15, 4, 4}, {2, 5});
  CHECK(max_abs_diff(source.forward(ids), target.forward(ids)) > 1e-4);

  const StateDict state = source.state_dict();
  CHECK(state.contains("blocks.0.attn.qkv.weight"));
  CHECK(state.size() == source.named_parameters().size());
  target.load_state_dict(state);
  CHECK(max_abs_diff(source.forward(ids), target.forward(ids)) == 0.0);
  // Values were copied, not shared.
  CHECK_FALSE(target.state_dict().at("token_embedding.weight").shares_storage_with(state.at("token_embedding.weight")));
}

TEST_CASE("load_state_dict lists every missing, unexpected and mismatched key", "[nn]") {
  Linear linear(3, 4);
  StateDict state;
  state.insert("weight", Tensor::zeros({4, 2}));
  state.insert("extra", Tensor::zeros({1}));
  state.insert("more", Tensor::zeros({1}));
  const Tensor before = linear.weight().clone();
  try {
    linear.load_state_dict(state);
    FAIL("load_state_dict accepted a broken state dict");
  } catch (const wf::Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Contains("missing keys (1): bias"));
    CHECK_THAT(message, Contains("unexpected keys (2): extra, more"));
    CHECK_THAT(message, Contains("'weight' has shape [4, 2] in the state dict but [4, 3] in the module"));
  }
  CHECK(max_abs_diff(linear.weight(), before) == 0.0);  // nothing was copied

  // Not strict: key differences are skipped, shapes still checked.
  CHECK_THROWS_WITH(linear.load_state_dict(state, false), Contains("[4, 2]"));
  StateDict partial;
  partial.insert("bias", Tensor::full({4}, 2.0));
  partial.insert("unused", Tensor::zeros({1}));
  linear.load_state_dict(partial, false);
  CHECK(linear.bias().at(3) == 2.0);

  // Dtypes must match when strict, and are converted otherwise.
  StateDict wide;
  wide.insert("weight", Tensor::ones({4, 3}, DType::f64));
  wide.insert("bias", Tensor::ones({4}, DType::f64));
  CHECK_THROWS_WITH(linear.load_state_dict(wide), Contains("'bias' has dtype f64 in the state dict but f32"));
  linear.load_state_dict(wide, false);
  CHECK(linear.weight().dtype() == DType::f32);
  CHECK(linear.weight().at(5) == 1.0);
}

TEST_CASE("initialisation depends only on the seed and the parameter's path", "[nn]") {
  Linear a(5, 6, true, 7), b(5, 6, true, 7), c(5, 6, true, 8);
  CHECK(max_abs_diff(a.weight(), b.weight()) == 0.0);
  CHECK(max_abs_diff(a.weight(), c.weight()) > 1e-3);
  CHECK(a.bias().to_vector<float>() == std::vector<float>(6, 0.0f));

  // GPT-2 init: normal(0, 0.02).
  Linear big(64, 64, false, 1);
  const auto w = big.weight().to_vector<double>();
  double mean = 0, sq = 0;
  for (double v : w) mean += v, sq += v * v;
  mean /= w.size();
  CHECK(std::abs(mean) < 2e-3);
  CHECK(std::sqrt(sq / w.size()) == Approx(0.02).epsilon(0.05));

  // A child's weights are those of a standalone module built with child_seed(name): no
  // hidden generator state, so construction order cannot matter.
  wf::models::Gpt model(small_gpt(11));
  wf::models::Gpt first(small_gpt(11));  // built after another model: same weights
  CHECK(max_abs_diff(model.transformer_block(1).mlp().fc().weight(),
                     first.transformer_block(1).mlp().fc().weight()) == 0.0);
  MLP mlp({.d_model = 4, .d_ff = 8, .seed = 5});
  Linear fc({.in_features = 4, .out_features = 8, .seed = mlp.child_seed("fc")});
  CHECK(max_abs_diff(mlp.fc().weight(), fc.weight()) == 0.0);

  // A tensor-parallel rank can draw exactly its rows of the full matrix.
  const Tensor rows_2_to_4 = normal_init({2, 5}, derive_seed(7, "weight"), 0.02, 2 * 5);
  for (std::int64_t r = 0; r < 2; ++r) {
    for (std::int64_t k = 0; k < 5; ++k) CHECK(rows_2_to_4.at({r, k}) == a.weight().at({r + 2, k}));
  }
  CHECK(derive_seed(1, "weight") != derive_seed(2, "weight"));
  CHECK(derive_seed(1, "weight") != derive_seed(1, "bias"));
}

TEST_CASE("train/eval propagate to every descendant, also to children registered later", "[nn]") {
  wf::models::Gpt model(small_gpt(1));
  model.eval();
  for (auto& [name, m] : model.named_modules()) CHECK_FALSE(m->is_training());
  model.train();
  for (auto& [name, m] : model.named_modules()) CHECK(m->is_training());

  Module parent;
  parent.eval();
  auto child = parent.register_module("child", std::make_shared<Dropout>(0.5));
  CHECK_FALSE(child->is_training());
}

TEST_CASE("Dropout is the identity in eval mode and drops while training", "[nn]") {
  Dropout dropout(0.5);
  const Tensor x = Tensor::ones({1000});
  dropout.eval();
  CHECK(max_abs_diff(dropout.forward(x), x) == 0.0);
  dropout.train();
  const auto y = dropout.forward(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    CHECK((v == 0.0f || v == 2.0f));
    zeros += v == 0.0f;
  }
  CHECK(zeros > 400);
  CHECK(zeros < 600);
  CHECK_THROWS_WITH(Dropout(1.0), Contains("[0, 1)"));
}

TEST_CASE("to(f64) converts parameters in place; zero_grad drops grads", "[nn]") {
  Scaled m(1);
  const Tensor handle = m.inner->weight();
  const Tensor before = handle.clone();
  m.to(DType::f64);
  CHECK(handle.dtype() == DType::f64);  // the layer's own handle sees the conversion
  CHECK(m.weight.dtype() == DType::f64);
  CHECK(m.steps.dtype() == DType::i64);  // integer buffers keep their dtype
  CHECK(m.offset.dtype() == DType::f64);
  CHECK(max_abs_diff(handle, before) == 0.0);
  CHECK(handle.requires_grad());

  const Tensor x = Tensor::randn_at({2, 3}, 1, 0, DType::f64);
  wf::sum(m.inner->forward(x)).backward();
  CHECK(m.inner->weight().grad().defined());
  CHECK(m.inner->weight().grad().dtype() == DType::f64);
  m.zero_grad();
  CHECK_FALSE(m.inner->weight().grad().defined());
  CHECK_THROWS_WITH(m.to(DType::i32), Contains("floating"));
}

TEST_CASE("ModuleList names its children by index", "[nn]") {
  ModuleList list(3);
  const std::uint64_t seed0 = list.next_seed();
  list.append(std::make_shared<Linear>(2, 2, false, seed0));
  list.append(std::make_shared<Linear>(2, 2, false, list.next_seed()));
  CHECK(list.size() == 2);
  CHECK(seed0 == list.child_seed("0"));
  CHECK(names_of(list.named_parameters()) == std::vector<std::string>{"0.weight", "1.weight"});
  CHECK(dynamic_cast<Linear*>(&list[1]) != nullptr);
  CHECK_THROWS_WITH(list[2], Contains("out of range"));
}
