// AdamW against a hand-written reference, weight-decay policy, state round trip, gradient
// clipping and the cosine schedule.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <vector>

#include "nn/module_testing.h"
#include "wallfacer/train/lr_schedule.h"
#include "wallfacer/train/optimizer.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::nn::testing::max_abs_diff;
using wf::train::AdamW;
using wf::train::AdamWOptions;

namespace {

Tensor leaf(const std::vector<double>& values, const wf::Shape& shape) {
  Tensor t = Tensor::from_vector(values, shape);
  t.set_requires_grad(true);
  return t;
}

// The gradient given at step t (1-based) to element i: varied signs and magnitudes.
double grad_at(int t, std::size_t i) { return std::sin(1.0 + 0.7 * t + 1.3 * static_cast<double>(i)) * (1 + i); }

}  // namespace

TEST_CASE("AdamW: three steps equal the textbook update", "[nn]") {
  const AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  std::vector<double> p{0.5, -1.0, 2.0, 0.0}, m(4, 0.0), v(4, 0.0);
  Tensor param = leaf(p, {2, 2});
  AdamW optimizer({param}, o);
  CHECK(optimizer.weight_decay_enabled(0));
  for (int t = 1; t <= 3; ++t) {
    std::vector<double> g(4);
    for (std::size_t i = 0; i < 4; ++i) g[i] = grad_at(t, i);
    param.set_grad(Tensor::from_vector(g, {2, 2}));
    optimizer.step();
    for (std::size_t i = 0; i < 4; ++i) {
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(o.beta1, t));
      const double v_hat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] = p[i] * (1 - o.lr * o.weight_decay) - o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
    for (std::size_t i = 0; i < 4; ++i) CHECK(param.at(static_cast<std::int64_t>(i)) == Approx(p[i]).epsilon(1e-12));
  }
  CHECK(optimizer.step_count(0) == 3);
}

TEST_CASE("AdamW: the EMA warm-up decay is min(d, (1 + t) / (10 + t)) after t updates", "[nn]") {
  using wf::train::ema_decay_at;
  using wf::train::ema_initial_weight;
  CHECK(ema_decay_at(0.995, 0, true) == Approx(0.1));  // the first update keeps 90% of the weights
  CHECK(ema_decay_at(0.995, 1, true) == Approx(2.0 / 11.0));
  CHECK(ema_decay_at(0.995, 90, true) == Approx(91.0 / 100.0));
  CHECK(ema_decay_at(0.995, 1790, true) == Approx(0.995));  // (1 + t) / (10 + t) reaches 0.995 at t = 1790
  CHECK(ema_decay_at(0.995, 1000000, true) == 0.995);
  CHECK(ema_decay_at(0.5, 7, true) == Approx(8.0 / 17.0));  // a low decay: the ramp binds until it reaches it,
  CHECK(ema_decay_at(0.5, 8, true) == 0.5);                  // at 9 / 18 for 0.5
  CHECK(ema_decay_at(0.995, 0, false) == 0.995);
  for (std::int64_t t = 0; t < 3000; t += 7) {
    CHECK(ema_decay_at(0.9999, t, true) == Approx(std::min(0.9999, (1.0 + t) / (10.0 + t))).epsilon(1e-15));
  }
  // The initial weights' share: the product of the decays. Without the warm-up 0.995^250 = 0.286
  // after 250 steps (the static `sample` of issue 26); with it 9! · 250! / 259! < 1e-13.
  CHECK(ema_initial_weight(0.995, 250, false) == Approx(std::pow(0.995, 250)));
  CHECK(ema_initial_weight(0.995, 2, true) == Approx(0.1 * 2.0 / 11.0));
  CHECK(ema_initial_weight(0.995, 250, true) < 1e-13);
  CHECK(ema_initial_weight(0.995, 0, true) == 1.0);
}

TEST_CASE("AdamW: the EMA starts at the initial weights, follows d·ema + (1 − d)·param and round-trips", "[nn]") {
  for (const bool warmup : {true, false}) {
    const AdamWOptions o{.lr = 0.05, .ema_decay = 0.8, .ema_warmup = warmup};
    const std::vector<double> initial{0.5, -1.0, 2.0, 0.0};
    Tensor param = leaf(initial, {2, 2});
    AdamW optimizer({param}, o);
    CHECK(!optimizer.ema(0).defined());
    std::vector<double> ema = initial;
    for (int t = 1; t <= 3; ++t) {
      std::vector<double> g(4);
      for (std::size_t i = 0; i < 4; ++i) g[i] = grad_at(t, i);
      param.set_grad(Tensor::from_vector(g, {2, 2}));
      optimizer.step();
      // The warm-up's decay after t - 1 earlier updates: 0.1, 2/11, 0.25 (all below 0.8).
      const double d = warmup ? std::min(0.8, (1.0 + (t - 1)) / (10.0 + (t - 1))) : 0.8;
      for (std::size_t i = 0; i < 4; ++i) {
        ema[i] = d * ema[i] + (1 - d) * param.at(static_cast<std::int64_t>(i));
        CHECK(optimizer.ema(0).at(static_cast<std::int64_t>(i)) == Approx(ema[i]).epsilon(1e-12));
      }
    }
    const wf::nn::StateDict state = optimizer.state_dict();
    REQUIRE(state.contains(wf::train::adamw_state_key(0, "ema")));
    Tensor other = leaf(initial, {2, 2});
    AdamW restored({other}, o);
    restored.load_state_dict(state);
    CHECK(max_abs_diff(restored.ema(0), optimizer.ema(0)) == 0.0);
    // A state saved without an EMA starts it from the parameter as it is.
    wf::nn::StateDict without;
    for (const auto& [key, tensor] : state) {
      if (key != wf::train::adamw_state_key(0, "ema")) without.insert(key, tensor);
    }
    AdamW started({other}, o);
    started.load_state_dict(without);
    CHECK(max_abs_diff(started.ema(0), other) == 0.0);
  }
}

TEST_CASE("AdamW: 1-D parameters get no weight decay; undefined grads are skipped", "[nn]") {
  Tensor matrix = leaf({1.0, 2.0, 3.0, 4.0}, {2, 2});
  Tensor bias = leaf({1.0, 2.0}, {2});
  Tensor unused = leaf({5.0}, {1});
  AdamW optimizer({matrix, bias, unused}, {.lr = 0.1, .weight_decay = 0.5});
  CHECK(optimizer.weight_decay_enabled(0));
  CHECK_FALSE(optimizer.weight_decay_enabled(1));
  // Zero gradients: Adam's step is 0, so only weight decay can move a parameter.
  matrix.set_grad(Tensor::zeros({2, 2}, DType::f64));
  bias.set_grad(Tensor::zeros({2}, DType::f64));
  optimizer.step();
  CHECK(matrix.at(3) == Approx(4.0 * (1 - 0.1 * 0.5)));
  CHECK(bias.at(1) == 2.0);
  CHECK(unused.at(0) == 5.0);
  CHECK(optimizer.step_count(2) == 0);

  optimizer.set_weight_decay(1, true);
  optimizer.step();
  CHECK(bias.at(1) == Approx(2.0 * (1 - 0.1 * 0.5)));

  optimizer.zero_grad();
  CHECK_FALSE(matrix.grad().defined());
  CHECK_THROWS_WITH(AdamW({matrix, matrix}), Contains("same tensor"));
  CHECK_THROWS_WITH(AdamW({Tensor::zeros({2}, DType::bf16)}), Contains("f32 or f64"));
  CHECK_THROWS_WITH(optimizer.set_lr(-1), Contains(">= 0"));
}

TEST_CASE("AdamW state_dict: resuming continues bit for bit", "[nn]") {
  auto make = [] { return std::vector<Tensor>{leaf({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3}), leaf({1.0, -1.0}, {2})}; };
  auto give_grads = [](std::vector<Tensor>& params, int t) {
    for (auto& p : params) {
      std::vector<double> g(static_cast<std::size_t>(p.numel()));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad_at(t, i);
      p.set_grad(Tensor::from_vector(g, p.shape()));
    }
  };
  std::vector<Tensor> a = make(), b = make();
  AdamW opt_a(a, {.lr = 0.05});
  for (int t = 1; t <= 2; ++t) give_grads(a, t), opt_a.step();
  const auto state = opt_a.state_dict();
  CHECK(state.keys() == std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                                                 "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq"});
  for (std::size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  AdamW opt_b(b, {.lr = 0.05});
  opt_b.load_state_dict(state);
  CHECK(opt_b.step_count(1) == 2);
  give_grads(a, 3), opt_a.step();
  give_grads(b, 3), opt_b.step();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0.0);

  wf::nn::StateDict broken;
  broken.insert("state.0.exp_avg", Tensor::zeros({3, 2}, DType::f64));
  broken.insert("state.7.step", Tensor::scalar(1, DType::i64));
  broken.insert("lr", Tensor::scalar(1));
  try {
    opt_b.load_state_dict(broken);
    FAIL("accepted a broken optimizer state");
  } catch (const wf::Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Contains("'state.0.exp_avg' has shape [3, 2] but parameter 0 has shape [2, 3]"));
    CHECK_THAT(message, Contains("unexpected key 'state.7.step'"));
    CHECK_THAT(message, Contains("unexpected key 'lr'"));
    CHECK_THAT(message, Contains("missing key 'state.0.step'"));
    CHECK_THAT(message, Contains("missing key 'state.0.exp_avg_sq'"));
  }
  CHECK(opt_b.step_count(1) == 3);  // unchanged by the failed load
}

TEST_CASE("clip_grad_norm scales the global norm to max_norm", "[nn]") {
  Tensor a = leaf({0, 0}, {2});
  Tensor b = leaf({0, 0, 0}, {3});
  Tensor no_grad = leaf({0}, {1});
  a.set_grad(Tensor::from_vector<double>({3, 0}, {2}));
  b.set_grad(Tensor::from_vector<double>({0, 4, 12}, {3}));
  const double norm = wf::train::clip_grad_norm({a, b, no_grad}, 1.0);
  CHECK(norm == Approx(13.0));
  CHECK(wf::train::clip_grad_norm({a, b}, 1e9) == Approx(1.0).epsilon(1e-6));  // the norm after clipping
  CHECK(a.grad().at(0) == Approx(3.0 / 13.0).epsilon(1e-6));
  CHECK(b.grad().at(2) == Approx(12.0 / 13.0).epsilon(1e-6));

  // Below the threshold nothing changes.
  a.set_grad(Tensor::from_vector<double>({0.3, 0.4}, {2}));
  CHECK(wf::train::clip_grad_norm({a}, 1.0) == Approx(0.5));
  CHECK(a.grad().at(1) == 0.4);
}

TEST_CASE("CosineSchedule: warmup from 0, cosine to min_lr, constant after", "[nn]") {
  const wf::train::CosineSchedule s{.base_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110};
  CHECK(s.lr_at(0) == 0.0);
  CHECK(s.lr_at(1) == Approx(0.1));
  CHECK(s.lr_at(5) == Approx(0.5));
  CHECK(s.lr_at(10) == Approx(1.0));
  CHECK(s.lr_at(60) == Approx(0.55));
  CHECK(s.lr_at(35) == Approx(0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(s.lr_at(110) == Approx(0.1));
  CHECK(s.lr_at(1000) == 0.1);
  const wf::train::CosineSchedule no_warmup{.base_lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4};
  CHECK(no_warmup.lr_at(0) == 2.0);
  CHECK(no_warmup.lr_at(2) == Approx(1.0));
  const wf::train::CosineSchedule bad{.base_lr = 1.0, .min_lr = 2.0, .warmup_steps = 0, .total_steps = 4};
  CHECK_THROWS_WITH(bad.lr_at(1), Contains("min_lr <= base_lr"));
}
