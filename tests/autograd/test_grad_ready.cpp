// The "gradient ready" hook (autograd/grad_hooks.h): it fires exactly once per outermost
// backward for every hooked leaf the backward reaches, and grad() then already holds the whole
// gradient — checked against central differences (f64) on fresh random inputs, for tied
// weights, activation checkpointing (also nested, also mixed with uses outside), accumulation
// over several backwards, graphs that change between backwards, outside gradients and
// retain_graph. Each case also checks that a leaf's AccumulateGrad runs once per backward.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <random>
#include <vector>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;
using autograd::TensorList;

namespace {

// A fresh seed per call, reported by Catch when a check fails.
std::uint64_t fresh_seed() {
  static std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

// Fires of both hooks on a set of leaves: per leaf, a copy of grad() at each ready fire and the
// number of AccumulateGrad applications. Removes its hooks when it goes.
class HookLog {
 public:
  explicit HookLog(std::vector<Tensor> leaves) : leaves_(std::move(leaves)) {
    for (const Tensor& leaf : leaves_) {
      const TensorImpl* key = leaf.impl_ptr().get();
      autograd::set_grad_ready_hook(leaf, [this, key](const Tensor& l) {
        CHECK_FALSE(autograd::grad_enabled());
        ready_[key].push_back(l.grad().defined() ? l.grad().clone() : Tensor());
        if (on_ready) on_ready(l);
      });
      autograd::set_grad_accumulated_hook(leaf, [this, key](const Tensor&) { ++applied_[key]; });
    }
  }
  ~HookLog() {
    for (const Tensor& leaf : leaves_) {
      autograd::clear_grad_ready_hook(leaf);
      autograd::clear_grad_accumulated_hook(leaf);
    }
  }
  HookLog(const HookLog&) = delete;
  HookLog& operator=(const HookLog&) = delete;

  const std::vector<Tensor>& ready(const Tensor& leaf) { return ready_[leaf.impl_ptr().get()]; }
  int applied(const Tensor& leaf) { return applied_[leaf.impl_ptr().get()]; }
  void reset_applied() { applied_.clear(); }

  std::function<void(const Tensor&)> on_ready;  // extra work inside each ready hook

 private:
  std::vector<Tensor> leaves_;
  std::map<const TensorImpl*, std::vector<Tensor>> ready_;
  std::map<const TensorImpl*, int> applied_;
};

// dL/dleaf by central differences, L = loss() evaluated without recording.
Tensor numeric_grad(const std::function<Tensor()>& loss, Tensor leaf) {
  autograd::NoGradGuard no_grad;
  const double eps = 1e-6;
  Tensor g = Tensor::zeros(leaf.shape(), DType::f64);
  double* x = leaf.data<double>();
  for (std::int64_t j = 0; j < leaf.numel(); ++j) {
    const double saved = x[j];
    x[j] = saved + eps;
    const double up = loss().at(0);
    x[j] = saved - eps;
    const double down = loss().at(0);
    x[j] = saved;
    g.data<double>()[j] = (up - down) / (2 * eps);
  }
  return g;
}

void require_numeric(const Tensor& actual, const Tensor& expected) { require_close(actual, expected, 1e-6, 1e-6); }

// One backward of loss() with every leaf hooked: each fires once, applies its sink once
// (`nested_applications` more for leaves a checkpoint recomputes), and holds `before` + dL/dleaf
// at fire time. Returns the numeric gradients.
void check_one_backward(const std::function<Tensor()>& loss, const std::vector<Tensor>& leaves,
                        const std::map<const TensorImpl*, int>& nested_applications = {}) {
  std::vector<Tensor> before, expected;
  for (const Tensor& leaf : leaves) {
    before.push_back(leaf.grad().defined() ? leaf.grad().clone() : Tensor::zeros(leaf.shape(), DType::f64));
    expected.push_back(add(before.back(), numeric_grad(loss, leaf)));
  }
  HookLog log(leaves);
  loss().backward();
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    INFO("leaf " << i);
    REQUIRE(log.ready(leaves[i]).size() == 1);
    require_numeric(log.ready(leaves[i])[0], expected[i]);
    require_close(leaves[i].grad(), log.ready(leaves[i])[0], 0, 0);  // nothing came after the fire
    const auto nested = nested_applications.find(leaves[i].impl_ptr().get());
    CHECK(log.applied(leaves[i]) == 1 + (nested == nested_applications.end() ? 0 : nested->second));
  }
}

}  // namespace

TEST_CASE("ready hook: a leaf used once fires once with its gradient", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({4, 3}, seed), b = random_leaf({4}, seed + 1), x = random_leaf({2, 3}, seed + 2);
  const Tensor g = random({2, 4}, seed + 3);
  check_one_backward([&] { return sum(mul(tanh(linear(x, w, b)), g)); }, {w, b, x});
}

TEST_CASE("ready hook: a tied weight used three times fires once, after the last use", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), x = random_leaf({2, 3}, seed + 1);
  const Tensor g = random({2, 3}, seed + 2);
  // embedding-like use, a hidden layer and the tied output projection: w three times.
  check_one_backward([&] { return sum(mul(linear(tanh(linear(matmul(x, w), w)), w, Tensor()), g)); }, {w, x});
}

TEST_CASE("ready hook: a checkpointed weight also used outside the checkpoint", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), x = random_leaf({2, 3}, seed + 1);
  const Tensor g = random({2, 3}, seed + 2);
  const auto segment = [&](const TensorList& in) { return TensorList{tanh(linear(in[0], w))}; };
  const auto loss = [&] { return sum(mul(linear(autograd::checkpoint(segment, {x})[0], w), g)); };
  // The recompute's nested backward applies w's sink once more; x is an input, not recomputed.
  check_one_backward(loss, {w, x}, {{w.impl_ptr().get(), 1}});
}

TEST_CASE("ready hook: two checkpointed segments sharing a weight", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), v = random_leaf({3, 3}, seed + 1), x = random_leaf({2, 3}, seed + 2);
  const Tensor g = random({2, 3}, seed + 3);
  const auto first = [&](const TensorList& in) { return TensorList{tanh(linear(in[0], w))}; };
  const auto second = [&](const TensorList& in) { return TensorList{tanh(linear(linear(in[0], w), v))}; };
  const auto loss = [&] {
    return sum(mul(autograd::checkpoint(second, {autograd::checkpoint(first, {x})[0]})[0], g));
  };
  // Only nested backwards add into w and v; the outer engine runs their sinks with no gradient
  // of its own, so the only applications are the two (w) and one (v) recomputes.
  check_one_backward(loss, {w, v, x}, {{w.impl_ptr().get(), 1}, {v.impl_ptr().get(), 0}});
}

TEST_CASE("ready hook: a checkpoint nested inside a checkpoint", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), v = random_leaf({3, 3}, seed + 1), x = random_leaf({2, 3}, seed + 2);
  const Tensor g = random({2, 3}, seed + 3);
  const auto inner = [&](const TensorList& in) { return TensorList{tanh(linear(in[0], w))}; };
  const auto outer = [&](const TensorList& in) {
    return TensorList{tanh(linear(autograd::checkpoint(inner, {in[0]})[0], v))};
  };
  // w is used inside the inner checkpoint only, and once more outside both.
  const auto loss = [&] { return sum(mul(linear(autograd::checkpoint(outer, {x})[0], w), g)); };
  check_one_backward(loss, {w, v, x}, {{w.impl_ptr().get(), 1}});
}

TEST_CASE("ready hook: accumulation over three backwards fires once each, with the running sum",
          "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), x = random_leaf({2, 3}, seed + 1);
  const auto segment = [&](const TensorList& in) { return TensorList{tanh(linear(in[0], w))}; };
  for (int microbatch = 0; microbatch < 3; ++microbatch) {
    INFO("microbatch " << microbatch);
    const Tensor g = random({2, 3}, seed + 10 + static_cast<std::uint64_t>(microbatch));  // a new batch each time
    const auto loss = [&] { return sum(mul(linear(autograd::checkpoint(segment, {x})[0], w), g)); };
    check_one_backward(loss, {w, x}, {{w.impl_ptr().get(), 1}});  // expects before + this gradient
  }
}

TEST_CASE("ready hook: a layer skipped in one backward does not fire there", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w1 = random_leaf({3, 3}, seed), w2 = random_leaf({3, 3}, seed + 1), x = random({2, 3}, seed + 2);
  bool skip = false;
  const auto loss = [&] {
    Tensor h = tanh(linear(x, w1));
    if (!skip) h = tanh(linear(h, w2));
    return sum(h);
  };
  check_one_backward(loss, {w1, w2});

  skip = true;
  const Tensor w2_before = w2.grad().clone();
  const Tensor expected_w1 = add(w1.grad(), numeric_grad(loss, w1));
  HookLog log({w1, w2});
  std::vector<bool> reaches;  // asked from inside the first ready hook: settles w2 in advance
  log.on_ready = [&](const Tensor&) {
    if (reaches.empty()) reaches = {autograd::outermost_backward_reaches(w1), autograd::outermost_backward_reaches(w2)};
  };
  loss().backward();
  REQUIRE(log.ready(w1).size() == 1);
  require_numeric(log.ready(w1)[0], expected_w1);
  CHECK(log.ready(w2).empty());
  CHECK(reaches == std::vector<bool>{true, false});
  require_close(w2.grad(), w2_before, 0, 0);
  CHECK_FALSE(autograd::outermost_backward_reaches(w1));  // no backward runs now
}

TEST_CASE("ready hook: a random branch (label dropout) fires the branch taken", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // Classifier-free guidance: the label embedding, or the null embedding when the label drops.
  Tensor label = random_leaf({1, 3}, seed), null_label = random_leaf({1, 3}, seed + 1);
  Tensor w = random_leaf({3, 3}, seed + 2);
  const Tensor x = random({2, 3}, seed + 3);
  std::mt19937_64 coin(seed);
  for (int step = 0; step < 6; ++step) {
    const bool dropped = coin() % 2 == 0;
    CAPTURE(step, dropped);
    const Tensor& taken = dropped ? null_label : label;
    const Tensor& other = dropped ? label : null_label;
    const auto segment = [&](const TensorList& in) { return TensorList{tanh(add(linear(in[0], w), taken))}; };
    // The checkpoint needs an input that requires grad: a fresh leaf on x, not hooked.
    Tensor xin = x.detach();
    xin.set_requires_grad(true);
    const auto branch_loss = [&] { return sum(autograd::checkpoint(segment, {xin})[0]); };
    const Tensor other_before = other.grad().defined() ? other.grad().clone() : Tensor();
    std::vector<Tensor> expected;
    for (const Tensor* t : std::vector<const Tensor*>{&taken, &w}) {
      expected.push_back(t->grad().defined() ? add(t->grad(), numeric_grad(branch_loss, *t))
                                             : numeric_grad(branch_loss, *t));
    }
    HookLog log({label, null_label, w});
    branch_loss().backward();
    REQUIRE(log.ready(taken).size() == 1);
    REQUIRE(log.ready(w).size() == 1);
    CHECK(log.ready(other).empty());
    require_numeric(log.ready(taken)[0], expected[0]);
    require_numeric(log.ready(w)[0], expected[1]);
    if (other_before.defined()) require_close(other.grad(), other_before, 0, 0);
  }
}

TEST_CASE("ready hook: a backward from an outside gradient reaches an input leaf", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  // A pipeline stage: the received activation is a leaf, dL/d(output) comes from the next stage.
  Tensor received = random_leaf({2, 3}, seed), w = random_leaf({4, 3}, seed + 1);
  const Tensor grad_out = random({2, 4}, seed + 2);
  const auto stage = [&] { return tanh(linear(received, w)); };
  const auto loss = [&] { return sum(mul(stage(), grad_out)); };  // what the outside gradient means
  const Tensor expected_received = numeric_grad(loss, received), expected_w = numeric_grad(loss, w);
  HookLog log({received, w});
  autograd::backward({stage()}, {grad_out});
  REQUIRE(log.ready(received).size() == 1);
  REQUIRE(log.ready(w).size() == 1);
  require_numeric(log.ready(received)[0], expected_received);
  require_numeric(log.ready(w)[0], expected_w);
  CHECK(log.applied(received) == 1);
  CHECK(log.applied(w) == 1);
}

TEST_CASE("ready hook: retain_graph, two backwards through one graph fire twice", "[autograd][grad_ready]") {
  const std::uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Tensor w = random_leaf({3, 3}, seed), x = random_leaf({2, 3}, seed + 1);
  const Tensor g = random({2, 3}, seed + 2);
  const auto segment = [&](const TensorList& in) { return TensorList{tanh(linear(in[0], w))}; };
  const auto loss = [&] { return sum(mul(linear(autograd::checkpoint(segment, {x})[0], w), g)); };
  const Tensor once_w = numeric_grad(loss, w), once_x = numeric_grad(loss, x);
  HookLog log({w, x});
  const Tensor y = loss();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward(Tensor(), /*retain_graph=*/true);
  REQUIRE(log.ready(w).size() == 2);
  REQUIRE(log.ready(x).size() == 2);
  require_numeric(log.ready(w)[0], once_w);
  require_numeric(log.ready(w)[1], scale(once_w, 2.0));
  require_numeric(log.ready(x)[1], scale(once_x, 2.0));
  CHECK(log.applied(w) == 4);  // per backward: the outer sink once, the recompute's nested backward once
  CHECK(log.applied(x) == 2);
}

TEST_CASE("ready hook: leaves only; the registry holds leaves weakly; cleared hooks stay silent",
          "[autograd][grad_ready]") {
  Tensor w = random_leaf({2}, 71);
  const Tensor y = mul(w, w);
  CHECK_THROWS_WITH(autograd::set_grad_ready_hook(y, [](const Tensor&) {}), Catch::Matchers::Contains("hook a leaf"));

  int fired = 0;
  std::weak_ptr<TensorImpl> dead_impl;
  {
    Tensor dead = random_leaf({2}, 72);
    dead_impl = dead.impl_ptr();
    autograd::set_grad_ready_hook(dead, [&](const Tensor&) { ++fired; });
  }
  CHECK(dead_impl.expired());  // the hook did not keep it alive
  for (int i = 0; i < 8; ++i) {
    Tensor fresh = random_leaf({2}, 73 + static_cast<std::uint64_t>(i));
    sum(fresh).backward();
  }
  CHECK(fired == 0);

  // Both kinds on one leaf are independent: clearing one keeps the other.
  int ready = 0, accumulated = 0;
  autograd::set_grad_ready_hook(w, [&](const Tensor&) { ++ready; });
  autograd::set_grad_accumulated_hook(w, [&](const Tensor&) { ++accumulated; });
  autograd::clear_grad_accumulated_hook(w);
  sum(mul(w, w)).backward();
  CHECK(ready == 1);
  CHECK(accumulated == 0);
  autograd::clear_grad_ready_hook(w);
  sum(mul(w, w)).backward();
  CHECK(ready == 1);
}

TEST_CASE("gradient_edge: one AccumulateGrad per leaf while a graph holds it", "[autograd][grad_ready]") {
  Tensor w = random_leaf({3}, 81);
  const autograd::Edge a = autograd::gradient_edge(w), b = autograd::gradient_edge(w);
  CHECK(a.node == b.node);
  CHECK(a.node->name() == "AccumulateGrad");
  const Tensor detached = w.detach();  // another tensor: another sink once it requires grad
  Tensor other = detached;
  other.set_requires_grad(true);
  CHECK(autograd::gradient_edge(other).node != a.node);
}
