// RoPE in SelfAttention and TransformerBlock's activation checkpointing at the attention output
// (WallFacer paper §4.6): f64 gradients of the input and every parameter equal to the plain
// block's within 1e-12 (MHA and GQA, rope on and off, dropout, causal, both position
// overloads); attention's forward runs once and its replay once; and the memory a stack of
// blocks holds after its forward, measured with wf::memory_stats.
#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include "nn/module_testing.h"
#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/nn/nn.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using namespace wf::nn;
using wf::nn::testing::check_module_gradients;
using wf::nn::testing::max_abs_diff;
using wf::nn::testing::randn64;

namespace {

Tensor positions_of(const std::vector<std::int64_t>& p) {
  return Tensor::from_vector<std::int64_t>(p, {static_cast<std::int64_t>(p.size())});
}

// Delegates to LocalAttention, counting forwards and replays and keeping the last options.
class CountingStrategy final : public AttentionStrategy {
 public:
  wf::AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const wf::AttentionOptions& options) override {
    ++forwards;
    last_options = options;
    return local.forward(q, k, v, options);
  }
  wf::AttentionResult replay(const Tensor& q, const Tensor& k, const Tensor& v, const wf::AttentionOptions& options,
                             const wf::AttentionResult& saved) override {
    ++replays;
    return local.replay(q, k, v, options, saved);
  }
  std::string name() const override { return "counting"; }
  LocalAttention local;
  int forwards = 0, replays = 0;
  wf::AttentionOptions last_options;
};

// A strategy that never learned to replay (the default replay throws).
class NoReplayStrategy final : public AttentionStrategy {
 public:
  wf::AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const wf::AttentionOptions& options) override {
    return wf::attention(q, k, v, options);
  }
  std::string name() const override { return "no-replay"; }
};

struct Result {
  Tensor out, dx;
  std::vector<Tensor> param_grads;
};

// L = Σ block(x)·w backpropagated, with the default generator reseeded so both blocks draw the
// same dropout masks.
template <class Forward>
Result run_block(TransformerBlock& block, const Tensor& input, const Tensor& w, Forward forward) {
  block.zero_grad();
  Tensor x = input.clone();
  x.set_requires_grad(true);
  wf::manual_seed(123);
  const Tensor out = forward(block, x);
  wf::sum(wf::mul(out, w)).backward();
  Result r{out.detach(), x.grad(), {}};
  for (auto& [name, p] : block.named_parameters()) r.param_grads.push_back(p.grad());
  return r;
}

}  // namespace

TEST_CASE("SelfAttention with rope: positions overload, offsets and gradients", "[nn][rope]") {
  SelfAttentionOptions options{.d_model = 8, .n_head = 2, .n_kv_head = 1, .init_std = 0.4, .seed = 3};
  options.rope = true;
  SelfAttention attention(options);
  attention.to(DType::f64);
  const Tensor x = randn64({2, 5, 8}, 1);

  // forward(x, offset) is forward(x, arange positions) with the offset handed to the strategy;
  // local causal attention masks by relative position, so both agree.
  const Tensor by_offset = attention.forward(x, 7);
  const Tensor by_positions = attention.forward(x, positions_of({7, 8, 9, 10, 11}));
  CHECK(max_abs_diff(by_offset, by_positions) < 1e-14);
  // Rope changes the output (without it, the offset would not matter at all).
  SelfAttentionOptions no_rope = options;
  no_rope.rope = false;
  SelfAttention plain(no_rope);
  plain.to(DType::f64);
  CHECK(max_abs_diff(plain.forward(x, 7), by_offset) > 1e-3);
  CHECK(max_abs_diff(plain.forward(x, 7), plain.forward(x)) == 0.0);

  // The positions overload passes offsets 0: a sequence-parallel strategy knows its layout.
  auto counting = std::make_shared<CountingStrategy>();
  attention.set_strategy(counting);
  attention.forward(x, positions_of({0, 9, 1, 8, 2}));
  CHECK(counting->last_options.q_offset == 0);
  CHECK(counting->last_options.kv_offset == 0);
  attention.forward(x, 3);
  CHECK(counting->last_options.q_offset == 3);
  CHECK(counting->last_options.kv_offset == 3);

  const Tensor zigzag = positions_of({0, 9, 1, 8, 2});
  check_module_gradients(attention, [&](const Tensor& in) { return attention.forward(in, zigzag); },
                         randn64({1, 5, 8}, 2));
  CHECK_THROWS_WITH(attention.forward(x, positions_of({0, 1})), Contains("positions must be [tokens] = [5]"));
  SelfAttentionOptions odd = options;
  odd.d_model = 6;
  CHECK_THROWS_WITH(SelfAttention(odd), Contains("head_dim = d_model / n_head must be even"));
}

// A user's feed-forward, as an embedding program would write one: SwiGLU with a learned gain.
class ScaledSwiGLU final : public FeedForward {
 public:
  explicit ScaledSwiGLU(const MLPOptions& options) : FeedForward(options.seed) {
    inner_ = register_module("inner", std::make_shared<SwiGLU>(options));
    gain_ = register_parameter("gain", init_normal("gain", {options.d_model}, 1.0));
  }
  Tensor forward(const Tensor& x) override { return wf::mul(inner_->forward(x), gain_); }

 private:
  std::shared_ptr<SwiGLU> inner_;
  Tensor gain_;
};

TEST_CASE("checkpointing at the attention output: gradients equal the plain block's (f64)", "[nn][checkpoint]") {
  struct Variant {
    const char* name;
    std::int64_t n_kv_head;
    bool rope;
    bool by_positions;
    FeedForwardKind feed_forward = FeedForwardKind::mlp;
    bool user_parts = false;  // a user's feed-forward and norm through the block's options
  };
  for (const Variant variant :
       {Variant{"MHA", 0, false, false}, Variant{"MHA rope", 0, true, false}, Variant{"GQA", 1, false, true},
        Variant{"GQA rope, zigzag positions", 2, true, true},
        Variant{"SwiGLU + RMSNorm (LLaMA's block)", 2, true, true, FeedForwardKind::swiglu},
        Variant{"a user's feed-forward and norm", 1, false, false, FeedForwardKind::mlp, true}}) {
    INFO(variant.name);
    TransformerBlockOptions options{.d_model = 16,
                                    .n_head = 4,
                                    .n_kv_head = variant.n_kv_head,
                                    .causal = true,
                                    .dropout = 0.2,
                                    .init_std = 0.3,
                                    .seed = 5};
    options.rope = variant.rope;
    options.feed_forward = variant.feed_forward;
    if (variant.feed_forward == FeedForwardKind::swiglu) options.norm = NormType::rms_norm;
    if (variant.user_parts) {
      options.make_feed_forward = [](const MLPOptions& o) { return std::make_shared<ScaledSwiGLU>(o); };
      options.make_norm = [](std::int64_t dim, double eps) { return std::make_shared<RMSNorm>(dim, eps); };
    }
    TransformerBlock plain(options);
    options.checkpoint_attention = true;
    TransformerBlock checkpointed(options);
    plain.to(DType::f64);
    checkpointed.to(DType::f64);

    const Tensor input = randn64({2, 6, 16}, 1), w = randn64({2, 6, 16}, 2);
    const Tensor zigzag = positions_of({0, 1, 10, 11, 4, 7});
    const auto forward = [&](TransformerBlock& block, const Tensor& x) {
      return variant.by_positions ? block.forward(x, zigzag) : block.forward(x, 3);
    };
    const Result a = run_block(plain, input, w, forward);
    const Result b = run_block(checkpointed, input, w, forward);
    CHECK(max_abs_diff(a.out, b.out) <= 1e-12);
    CHECK(max_abs_diff(a.dx, b.dx) <= 1e-12);
    const auto names = plain.named_parameters();
    for (std::size_t i = 0; i < names.size(); ++i) {
      INFO(names[i].first);
      REQUIRE(b.param_grads[i].defined());
      CHECK(max_abs_diff(a.param_grads[i], b.param_grads[i]) <= 1e-12);
    }
  }
}

TEST_CASE("checkpointing at the attention output: each weight's ready hook fires once, with its final gradient",
          "[nn][checkpoint][grad_ready]") {
  // One block applied twice (shared weights, two checkpoint nodes): every weight gets gradient
  // only from the recomputes' nested backwards, twice, and must fire once, after both.
  TransformerBlockOptions options{.d_model = 8, .n_head = 2, .n_kv_head = 1, .causal = true, .init_std = 0.4, .seed = 6};
  TransformerBlock plain(options);
  options.checkpoint_attention = true;
  TransformerBlock checkpointed(options);
  plain.to(DType::f64);
  checkpointed.to(DType::f64);
  const Tensor input = randn64({2, 4, 8}, 7), w = randn64({2, 4, 8}, 8);
  const auto backward_twice = [&](TransformerBlock& block) {
    block.zero_grad();
    Tensor x = input.clone();
    x.set_requires_grad(true);
    wf::sum(wf::mul(block.forward(block.forward(x, 0), 0), w)).backward();
  };
  backward_twice(plain);

  const auto params = checkpointed.named_parameters();
  std::vector<std::vector<Tensor>> fired(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    wf::autograd::set_grad_ready_hook(params[i].second, [&fired, i](const Tensor& p) { fired[i].push_back(p.grad().clone()); });
  }
  backward_twice(checkpointed);
  const auto reference = plain.named_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    wf::autograd::clear_grad_ready_hook(params[i].second);
    REQUIRE(fired[i].size() == 1);
    CHECK(max_abs_diff(fired[i][0], params[i].second.grad()) == 0.0);
    CHECK(max_abs_diff(fired[i][0], reference[i].second.grad()) <= 1e-12);
  }
}

TEST_CASE("checkpointing at the attention output: gradcheck of a block without dropout", "[nn][checkpoint]") {
  TransformerBlockOptions options{.d_model = 8, .n_head = 2, .n_kv_head = 1, .init_std = 0.4, .seed = 9};
  options.rope = true;
  options.checkpoint_attention = true;
  TransformerBlock block(options);
  block.to(DType::f64);
  check_module_gradients(block, [&](const Tensor& x) { return block.forward(x, 2); }, randn64({1, 4, 8}, 3));
}

TEST_CASE("checkpointing at the attention output runs attention once and replays it once", "[nn][checkpoint]") {
  TransformerBlockOptions options{.d_model = 8, .n_head = 2, .dropout = 0.1, .seed = 4};
  options.checkpoint_attention = true;
  TransformerBlock block(options);
  auto counting = std::make_shared<CountingStrategy>();
  block.attention().set_strategy(counting);
  Tensor x = Tensor::randn_at({2, 4, 8}, 1, 0);
  x.set_requires_grad(true);
  wf::sum(block.forward(x)).backward();
  CHECK(counting->forwards == 1);
  CHECK(counting->replays == 1);
  REQUIRE(x.grad().defined());

  // Without a graph there is nothing to checkpoint: attention runs, nothing is replayed.
  {
    wf::NoGradGuard no_grad;
    block.forward(x);
  }
  CHECK(counting->forwards == 2);
  CHECK(counting->replays == 1);
  // The plain block never replays.
  block.set_checkpointing(false, false);
  wf::sum(block.forward(x)).backward();
  CHECK(counting->forwards == 3);
  CHECK(counting->replays == 1);

  // A strategy that cannot replay fails in backward, naming itself.
  block.set_checkpointing(true, false);
  block.attention().set_strategy(std::make_shared<NoReplayStrategy>());
  const Tensor loss = wf::sum(block.forward(x));
  CHECK_THROWS_WITH(loss.backward(), Contains("no-replay attention cannot replay"));
}

TEST_CASE("checkpointing at the attention output: memory held after the forward of 4 blocks", "[nn][checkpoint]") {
  // B = 2, T = 128, d = 64, 4 heads, f32. Checkpointed, a block keeps its input x and attention
  // out (d floats per token each) and lse (h per token); the plain block keeps every
  // intermediate of norms, projections and the MLP.
  const auto held_after_forward = [](bool checkpoint) {
    ModuleList blocks(1);
    for (int i = 0; i < 4; ++i) {
      TransformerBlockOptions options{.d_model = 64, .n_head = 4, .seed = blocks.next_seed()};
      options.rope = true;
      options.checkpoint_attention = checkpoint;
      blocks.append(std::make_shared<TransformerBlock>(options));
    }
    Tensor x = Tensor::randn_at({2, 128, 64}, 1, 0);
    x.set_requires_grad(true);
    const std::int64_t before = wf::memory_stats().live_bytes;
    Tensor h = x;
    for (int i = 0; i < 4; ++i) h = dynamic_cast<TransformerBlock&>(blocks[i]).forward(h);
    const std::int64_t held = wf::memory_stats().live_bytes - before;
    wf::sum(h).backward();  // and the checkpointed stack still trains
    REQUIRE(dynamic_cast<TransformerBlock&>(blocks[0]).attention().qkv().weight().grad().defined());
    return held;
  };
  const std::int64_t plain = held_after_forward(false), checkpointed = held_after_forward(true);
  std::printf("memory held after the forward of 4 blocks (B=2, T=128, d=64, h=4, f32): plain %lld bytes, "
              "checkpointed at the attention output %lld bytes (ratio %.3f)\n",
              static_cast<long long>(plain), static_cast<long long>(checkpointed),
              static_cast<double>(checkpointed) / static_cast<double>(plain));
  // Per block and token: x (64) + out (64) + lse (4) floats = 528 bytes, for 256 tokens; plus
  // the block's rope positions (128 i64). Measured: exactly that, 544768 bytes; plain 4231168.
  CHECK(checkpointed <= 4 * (256 * 528 + 128 * 8));
  CHECK(static_cast<double>(checkpointed) / static_cast<double>(plain) < 0.2);
}

TEST_CASE("run_attention_block: a block with two inputs (DiT-style conditioning) checkpoints exactly", "[nn][checkpoint]") {
  // before(x, c) = heads of attn.project(norm(x) ⊙ (1 + c)); after(x, c, out) = x + attn.output(out) ⊙ c:
  // the conditioning reaches both halves, so its gradient is the sum of two recomputes.
  SelfAttention attn(SelfAttentionOptions{.d_model = 8, .n_head = 2, .n_kv_head = 1, .init_std = 0.4, .seed = 4});
  RMSNorm norm(8);
  attn.to(DType::f64);
  norm.to(DType::f64);
  const Tensor positions = positions_of({0, 1, 2, 3, 4});
  const auto run = [&](bool checkpoint, const Tensor& x, const Tensor& c) {
    AttentionSplit split;
    split.before = [&](const wf::autograd::TensorList& in) {
      return attn.project(wf::mul(norm.forward(in[0]), wf::add(in[1], Tensor::ones({8}, DType::f64))), positions);
    };
    split.after = [&](const wf::autograd::TensorList& in, const Tensor& out) {
      return wf::autograd::TensorList{wf::add(in[0], wf::mul(attn.output(out), in[1]))};
    };
    split.strategy = attn.strategy();
    split.options = attn.attention_options(0);
    return run_attention_block(std::move(split), {x, c}, checkpoint)[0];
  };
  struct Grads {
    Tensor out, dx, dc;
    std::vector<Tensor> params;
  };
  const auto grads = [&](bool checkpoint, bool train_c) {
    Tensor x = randn64({2, 5, 8}, 7), c = randn64({8}, 8);
    x.set_requires_grad(true);
    c.set_requires_grad(train_c);  // a frozen conditioning gets no gradient, and none is computed
    attn.zero_grad();
    norm.zero_grad();
    Grads g;
    g.out = run(checkpoint, x, c);
    wf::sum(wf::mul(g.out, randn64({2, 5, 8}, 9))).backward();
    g.dx = x.grad();
    g.dc = c.grad();
    for (const Tensor& p : attn.parameters()) g.params.push_back(p.grad().clone());
    for (const Tensor& p : norm.parameters()) g.params.push_back(p.grad().clone());
    return g;
  };
  for (const bool train_c : {true, false}) {
    INFO((train_c ? "trained" : "frozen") << " conditioning");
    const Grads plain = grads(false, train_c), checkpointed = grads(true, train_c);
    CHECK(max_abs_diff(plain.out, checkpointed.out) <= 1e-12);
    CHECK(max_abs_diff(plain.dx, checkpointed.dx) <= 1e-12);
    if (train_c) {
      CHECK(max_abs_diff(plain.dc, checkpointed.dc) <= 1e-12);
    } else {
      CHECK_FALSE(checkpointed.dc.defined());
    }
    REQUIRE(plain.params.size() == checkpointed.params.size());
    for (std::size_t i = 0; i < plain.params.size(); ++i) {
      CHECK(max_abs_diff(plain.params[i], checkpointed.params[i]) <= 1e-12);
    }
  }
}
