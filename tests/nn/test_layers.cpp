// Layers: output shapes, gradients (f64 central differences, inputs and every parameter),
// causality, grouped-query attention, pluggable attention and activation checkpointing.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>

#include "wallfacer/models/gpt.h"
#include "nn/module_testing.h"
#include "wallfacer/nn/nn.h"
#include "wallfacer/ops/ops.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using namespace wf::nn;
using wf::nn::testing::check_module_gradients;
using wf::nn::testing::max_abs_diff;
using wf::nn::testing::randn64;

TEST_CASE("Linear: shapes, bias-free variant and gradients", "[nn]") {
  Linear linear(3, 4, true, 1);
  CHECK(linear.weight().shape() == wf::Shape{4, 3});
  CHECK(linear.forward(Tensor::zeros({2, 5, 3})).shape() == wf::Shape{2, 5, 4});
  CHECK_THROWS_WITH(linear.forward(Tensor::zeros({2, 4})), Contains("must end in 3 features"));
  CHECK_FALSE(Linear(3, 4, false).bias().defined());
  CHECK(Linear(3, 4, false).named_parameters().size() == 1);

  linear.to(DType::f64);
  check_module_gradients(linear, [&](const Tensor& x) { return linear.forward(x); }, randn64({2, 3}, 2));
}

TEST_CASE("Embedding: lookup shape and gradient", "[nn]") {
  Embedding embedding(10, 4, 1);
  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 3, 3, 9, 0, 1}, {2, 3});
  const Tensor out = embedding.forward(ids);
  CHECK(out.shape() == wf::Shape{2, 3, 4});
  CHECK(out.at({1, 0, 2}) == embedding.weight().at({9, 2}));
  CHECK_THROWS_WITH(embedding.forward(Tensor::zeros({2})), Contains("i64 or i32"));
  embedding.to(DType::f64);
  check_module_gradients(embedding, [&](const Tensor& x) { return embedding.forward(x); }, ids);
}

TEST_CASE("LayerNorm and RMSNorm: shapes and gradients", "[nn]") {
  LayerNorm layer_norm(5);
  RMSNorm rms_norm(5);
  CHECK(layer_norm.forward(Tensor::ones({2, 3, 5})).shape() == wf::Shape{2, 3, 5});
  CHECK(rms_norm.forward(Tensor::ones({2, 3, 5})).shape() == wf::Shape{2, 3, 5});
  CHECK(LayerNorm(5, 1e-5, false).named_parameters().empty());
  CHECK_THROWS_WITH(layer_norm.forward(Tensor::ones({2, 4})), Contains("must end in 5 features"));

  // Non-trivial affine parameters, so their gradients are not a special case.
  layer_norm.to(DType::f64);
  rms_norm.to(DType::f64);
  StateDict ln_state;
  ln_state.insert("weight", randn64({5}, 3));
  ln_state.insert("bias", randn64({5}, 4));
  layer_norm.load_state_dict(ln_state);
  StateDict rms_state;
  rms_state.insert("weight", randn64({5}, 5));
  rms_norm.load_state_dict(rms_state);
  const Tensor x = randn64({3, 5}, 6);
  check_module_gradients(layer_norm, [&](const Tensor& in) { return layer_norm.forward(in); }, x);
  check_module_gradients(rms_norm, [&](const Tensor& in) { return rms_norm.forward(in); }, x);

  LayerNorm plain(5, 1e-5, false);
  plain.to(DType::f64);
  check_module_gradients(plain, [&](const Tensor& in) { return plain.forward(in); }, x);
}

TEST_CASE("MLP: default width, both activations, gradients", "[nn]") {
  MLP mlp({.d_model = 4, .seed = 1});
  CHECK(mlp.options().d_ff == 16);
  CHECK(mlp.forward(Tensor::zeros({2, 3, 4})).shape() == wf::Shape{2, 3, 4});
  for (const Activation activation : {Activation::gelu, Activation::silu}) {
    MLP small({.d_model = 3, .d_ff = 5, .activation = activation, .init_std = 0.5, .seed = 2});
    small.to(DType::f64);
    INFO(activation_name(activation));
    check_module_gradients(small, [&](const Tensor& x) { return small.forward(x); }, randn64({2, 3}, 3));
  }
}

// The fc of a GELU MLP runs as one linear_gelu node (Linear::forward_gelu), which a backend may
// fuse into the GEMM; on the CPU its output and every parameter's gradient keep the bits of
// proj(gelu(fc(x))), in f32 and under bf16 mixed precision.
TEST_CASE("MLP: fc and GELU are one node with the composition's bits", "[nn]") {
  for (const DType activations : {DType::f32, DType::bf16}) {
    INFO(wf::dtype_name(activations));
    MLP mlp({.d_model = 8, .d_ff = 24, .init_std = 0.5, .seed = 3});
    const Tensor x = Tensor::randn_at({2, 3, 8}, 4, 0).to(activations);
    const auto grads = [&](const Tensor& y) {
      mlp.zero_grad();
      wf::sum(wf::cast(y, DType::f32)).backward();
      std::vector<Tensor> out;
      for (const Tensor& p : mlp.parameters()) out.push_back(p.grad().clone());
      return out;
    };
    const Tensor fused = mlp.forward(x);
    REQUIRE(fused.grad_fn()->next_edges()[0].node->name() == "linear_gelu");
    const std::vector<Tensor> fused_grads = grads(fused);
    const Tensor composed = mlp.proj().forward(wf::gelu(mlp.fc().forward(x)));
    const std::vector<Tensor> composed_grads = grads(composed);
    CHECK(max_abs_diff(fused, composed) == 0.0);
    REQUIRE(fused_grads.size() == composed_grads.size());
    for (std::size_t i = 0; i < fused_grads.size(); ++i) CHECK(max_abs_diff(fused_grads[i], composed_grads[i]) == 0.0);
  }
}

// Linear::forward_add is one linear_add node with add(residual, forward(x))'s bits on the CPU; a
// subclass that replaces forward (here a stand-in for the tensor-parallel layers) gets the composition.
TEST_CASE("Linear::forward_add: one linear_add node, the composition's bits; a subclass composes", "[nn]") {
  struct Doubling final : Linear {
    using Linear::Linear;
    Tensor forward(const Tensor& x) override { return wf::scale(Linear::forward(x), 2.0); }
  };
  Linear linear({.in_features = 6, .out_features = 5, .init_std = 0.5, .seed = 2});
  const Tensor x = Tensor::randn_at({2, 3, 6}, 4, 0), residual = Tensor::randn_at({2, 3, 5}, 5, 0);
  const Tensor fused = linear.forward_add(x, residual);
  CHECK(fused.grad_fn()->name() == "linear_add");
  CHECK(max_abs_diff(fused, wf::add(residual, linear.forward(x))) == 0.0);
  CHECK_THROWS_WITH(linear.forward_add(Tensor::zeros({2, 4}), residual), Contains("must end in 6 features"));

  Doubling doubling({.in_features = 6, .out_features = 5, .init_std = 0.5, .seed = 2});
  const Tensor composed = doubling.forward_add(x, residual);
  CHECK(composed.grad_fn()->name() == "add");
  CHECK(max_abs_diff(composed, wf::add(residual, wf::scale(linear.forward(x), 2.0))) == 0.0);
}

// FeedForward::forward_add: MLP and SwiGLU add the residual inside their output projection while
// their dropout is the identity (eval mode, or p 0), with residual + forward(x)'s bits and
// gradients; with dropout on in training they compose.
TEST_CASE("MLP and SwiGLU forward_add: the residual inside the projection unless dropout is on", "[nn]") {
  const Tensor x = Tensor::randn_at({2, 3, 8}, 4, 0), residual = Tensor::randn_at({2, 3, 8}, 5, 0);
  const MLPOptions plain{.d_model = 8, .d_ff = 24, .init_std = 0.5, .seed = 3};
  MLPOptions with_dropout = plain;
  with_dropout.dropout = 0.5;
  const std::shared_ptr<FeedForward> modules[] = {std::make_shared<MLP>(plain), std::make_shared<SwiGLU>(plain),
                                                  std::make_shared<MLP>(with_dropout)};
  for (const auto& ff : modules) {
    const bool dropout = ff.get() == modules[2].get();
    INFO((dropout ? "MLP with dropout, in eval mode" : ff.get() == modules[0].get() ? "MLP" : "SwiGLU"));
    const auto grads = [&](const Tensor& y) {
      ff->zero_grad();
      wf::sum(wf::mul(y, residual)).backward();
      std::vector<Tensor> out;
      for (const Tensor& p : ff->parameters()) out.push_back(p.grad().clone());
      return out;
    };
    ff->train(!dropout);  // eval mode makes the dropout the identity
    const Tensor fused = ff->forward_add(x, residual);
    CHECK(fused.grad_fn()->name() == "linear_add");
    const std::vector<Tensor> fused_grads = grads(fused);
    const Tensor composed = wf::add(residual, ff->forward(x));
    CHECK(max_abs_diff(fused, composed) == 0.0);
    const std::vector<Tensor> composed_grads = grads(composed);
    for (std::size_t i = 0; i < fused_grads.size(); ++i) CHECK(max_abs_diff(fused_grads[i], composed_grads[i]) == 0.0);
  }
  // In training with dropout on, the mask sits between the projection and the add: composed.
  MLP mlp(with_dropout);
  mlp.train(true);
  CHECK(mlp.forward_add(x, residual).grad_fn()->name() == "add");
}

TEST_CASE("SelfAttention: fused QKV widths, GQA and gradients", "[nn]") {
  SECTION("multi-head") {
    SelfAttention attention({.d_model = 8, .n_head = 2, .seed = 1});
    CHECK(attention.qkv().weight().shape() == wf::Shape{24, 8});
    CHECK(attention.forward(Tensor::zeros({2, 5, 8})).shape() == wf::Shape{2, 5, 8});
    CHECK(attention.strategy()->name() == "local");
  }
  SECTION("grouped-query") {
    SelfAttention attention({.d_model = 8, .n_head = 4, .n_kv_head = 2, .init_std = 0.5, .seed = 1});
    CHECK(attention.head_dim() == 2);
    CHECK(attention.qkv().weight().shape() == wf::Shape{(4 + 2 * 2) * 2, 8});
    CHECK(attention.forward(Tensor::zeros({1, 3, 8})).shape() == wf::Shape{1, 3, 8});
    attention.to(DType::f64);
    check_module_gradients(attention, [&](const Tensor& x) { return attention.forward(x); }, randn64({1, 3, 8}, 2));
  }
  SECTION("non-causal, with a position offset") {
    SelfAttention attention({.d_model = 4, .n_head = 2, .causal = false, .init_std = 0.5, .seed = 3});
    attention.to(DType::f64);
    check_module_gradients(attention, [&](const Tensor& x) { return attention.forward(x, 5); }, randn64({2, 3, 4}, 4));
  }
  CHECK_THROWS_WITH(SelfAttention({.d_model = 8, .n_head = 3}), Contains("not divisible"));
  CHECK_THROWS_WITH(SelfAttention({.d_model = 8, .n_head = 4, .n_kv_head = 3}), Contains("must divide"));
  SelfAttention attention({.d_model = 8, .n_head = 2});
  CHECK_THROWS_WITH(attention.forward(Tensor::zeros({2, 8})), Contains("[batch, tokens, 8]"));
}

TEST_CASE("causal SelfAttention: output at t ignores tokens after t", "[nn]") {
  SelfAttention attention({.d_model = 8, .n_head = 2, .n_kv_head = 1, .init_std = 0.3, .seed = 4});
  const Tensor x = Tensor::randn_at({2, 6, 8}, 5, 0);
  Tensor changed = x.clone();
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t t = 4; t < 6; ++t) {
      for (std::int64_t c = 0; c < 8; ++c) changed.set({b, t, c}, 3.0 * (c + 1));
    }
  }
  const Tensor y = attention.forward(x), z = attention.forward(changed);
  CHECK(max_abs_diff(wf::narrow(y, 1, 0, 4), wf::narrow(z, 1, 0, 4)) < 1e-6);
  CHECK(max_abs_diff(wf::narrow(y, 1, 4, 2), wf::narrow(z, 1, 4, 2)) > 1e-3);
}

namespace {

// A strategy that delegates to LocalAttention and counts the calls: stands in for the
// distributed strategies, which the model must run without knowing about them.
class CountingAttention final : public AttentionStrategy {
 public:
  wf::AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const wf::AttentionOptions& options) override {
    ++calls;
    last_offset = options.q_offset;
    return local.forward(q, k, v, options);
  }
  std::string name() const override { return "counting"; }
  LocalAttention local;
  int calls = 0;
  std::int64_t last_offset = -1;
};

}  // namespace

TEST_CASE("the attention strategy is pluggable at run time", "[nn]") {
  wf::models::Gpt model({.vocab_size = 16, .max_seq_len = 8, .n_layer = 3, .n_head = 2, .d_model = 8, .seed = 1});
  const Tensor ids = Tensor::from_vector<std::int64_t>({1, 2, 3, 4}, {1, 4});
  const Tensor before = model.forward(ids);
  auto counting = std::make_shared<CountingAttention>();
  CHECK(set_attention_strategy(model, counting) == 3);
  const auto block = [&](std::size_t i) -> TransformerBlock& { return model.transformer_block(i); };
  CHECK(block(2).attention().strategy()->name() == "counting");
  block(0).forward(Tensor::zeros({1, 4, 8}), 2);
  CHECK(counting->calls == 1);
  CHECK(counting->last_offset == 2);
  model.forward(ids);
  CHECK(counting->calls == 4);
  CHECK(max_abs_diff(model.forward(ids), before) == 0.0);
  CHECK_THROWS_WITH(block(0).attention().set_strategy(nullptr), Contains("null"));
}

TEST_CASE("TransformerBlock: shapes, RMSNorm/SiLU variant, gradients", "[nn]") {
  TransformerBlock block({.d_model = 8, .n_head = 2, .seed = 1});
  CHECK(block.forward(Tensor::zeros({2, 3, 8})).shape() == wf::Shape{2, 3, 8});

  TransformerBlock small({.d_model = 4,
                          .n_head = 2,
                          .n_kv_head = 1,
                          .d_ff = 6,
                          .activation = Activation::silu,
                          .norm = NormType::rms_norm,
                          .init_std = 0.4,
                          .seed = 2});
  CHECK(dynamic_cast<RMSNorm*>(small.named_children()[0].second.get()) != nullptr);
  small.to(DType::f64);
  check_module_gradients(small, [&](const Tensor& x) { return small.forward(x); }, randn64({1, 3, 4}, 3));
}

TEST_CASE("TransformerBlock with checkpointing: same loss and gradients as without", "[nn]") {
  const TransformerBlockOptions options{.d_model = 8, .n_head = 2, .dropout = 0.2, .seed = 7};
  TransformerBlock plain(options);
  TransformerBlock checkpointed(options);
  checkpointed.set_checkpointing(true, true);

  const Tensor input = Tensor::randn_at({2, 4, 8}, 8, 0);
  const Tensor w = Tensor::randn_at({2, 4, 8}, 9, 0);
  auto run = [&](TransformerBlock& block) {
    Tensor x = input.clone();
    x.set_requires_grad(true);
    wf::manual_seed(123);  // the same dropout masks for both blocks
    const Tensor loss = wf::sum(wf::mul(block.forward(x), w));
    loss.backward();
    return std::make_pair(loss.item(), x.grad());
  };
  const auto [loss_plain, dx_plain] = run(plain);
  const auto [loss_checkpointed, dx_checkpointed] = run(checkpointed);
  CHECK(loss_checkpointed == Approx(loss_plain).epsilon(1e-6));
  CHECK(max_abs_diff(dx_plain, dx_checkpointed) < 1e-5);
  const auto a = plain.named_parameters(), b = checkpointed.named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(b[i].second.grad().defined());
    CHECK(max_abs_diff(a[i].second.grad(), b[i].second.grad()) < 1e-5);
  }

  // Without a graph (inference) the checkpoint is skipped and the output is unchanged.
  wf::NoGradGuard no_grad;
  plain.eval();
  checkpointed.eval();
  CHECK(max_abs_diff(plain.forward(input), checkpointed.forward(input)) == 0.0);
}
