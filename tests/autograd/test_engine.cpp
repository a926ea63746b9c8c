// The autograd engine seen through real ops: graph shapes (diamonds, shared leaves), gradient
// accumulation, outside gradients, graph freeing, grad mode, detach, custom Functions,
// activation checkpointing and gradcheck's ability to catch a wrong backward.
#include <catch2/catch.hpp>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;
using autograd::Context;

namespace {

// y = x² via the subclass API; `gradient_factor` 2 is right, anything else is a planted bug.
struct Square final : autograd::Function {
  explicit Square(double gradient_factor = 2.0) : factor(gradient_factor) {}
  TensorList forward(Context& ctx, const TensorList& in) override {
    ctx.save_for_backward({in[0]});
    return {mul(in[0], in[0])};
  }
  TensorList backward(Context& ctx, const TensorList& grad) override {
    return {mul(grad[0], scale(ctx.saved()[0], factor))};
  }
  std::string name() const override { return "Square"; }
  double factor;
};

Tensor square(const Tensor& x, double gradient_factor = 2.0) {
  return autograd::apply_function(std::make_shared<Square>(gradient_factor), {x})[0];
}

// y = a·b³ via the lambda API: two inputs, each gradient only when needed.
Tensor mul_cube(const Tensor& a, const Tensor& b) {
  return autograd::apply_function(
      "mul_cube", {a, b},
      [](Context& ctx, const TensorList& in) {
        ctx.save_for_backward({in[0], in[1]});
        return TensorList{mul(in[0], mul(in[1], mul(in[1], in[1])))};
      },
      [](Context& ctx, const TensorList& grad) {
        const Tensor &a = ctx.saved()[0], &b = ctx.saved()[1];
        const Tensor b2 = mul(b, b);
        return TensorList{ctx.needs_input_grad(0) ? mul(grad[0], mul(b2, b)) : Tensor(),
                          ctx.needs_input_grad(1) ? mul(grad[0], scale(mul(a, b2), 3.0)) : Tensor()};
      })[0];
}

}  // namespace

TEST_CASE("a diamond graph sums the gradients of both paths", "[autograd][engine]") {
  Tensor x = random_leaf({2, 3}, 1);
  const Tensor y = add(mul(x, x), mul(x, x));
  sum(y).backward();
  require_close(x.grad(), scale(x, 4.0).detach(), 1e-15, 1e-15);
}

TEST_CASE("one leaf used by many ops gets one summed gradient", "[autograd][engine]") {
  Tensor x = random_leaf({4}, 2);
  const Tensor y = sum(mul(exp(x), x));  // d/dx (x·eˣ) = eˣ(1 + x)
  y.backward();
  for (std::int64_t i = 0; i < 4; ++i) REQUIRE(x.grad().at(i) == Approx(std::exp(x.at(i)) * (1 + x.at(i))).epsilon(1e-13));
}

TEST_CASE("a node reached by several gradients, two of them one aliased tensor, sums them all", "[autograd][engine]") {
  // h feeds four uses: add(h, h) hands the same gradient tensor to both of its inputs, so the
  // engine must not sum into that tensor in place; the third and fourth arrivals add into the
  // engine's own copy. d/dh Σ(2h + 3h + h²) = 5 + 2h; h = 2x, so dx = 2·(5 + 4x).
  Tensor x = random_leaf({5}, 4);
  const Tensor h = scale(x, 2.0);
  const Tensor y = add(add(add(h, h), scale(h, 3.0)), mul(h, h));
  sum(y).backward();
  require_close(x.grad(), scale(add_scalar(scale(x, 4.0), 5.0), 2.0).detach(), 1e-14, 1e-14);
}

TEST_CASE("leaves never share gradient memory with each other or with the caller", "[autograd][engine]") {
  // A leaf adopts its incoming gradient only when nothing else can reach it. add's backward hands
  // one tensor to both inputs: the two leaves must still end up with separate gradients.
  Tensor x = random_leaf({6}, 5), y = random_leaf({6}, 6);
  sum(add(x, y)).backward();
  REQUIRE(x.grad().data<double>() != y.grad().data<double>());
  Tensor xg = x.grad();
  xg.fill_(7.0);
  CHECK(y.grad().at(0) == 1.0);

  // A gradient passed in by the caller stays the caller's.
  Tensor z = random_leaf({3}, 7);
  Tensor g = Tensor::ones({3}, DType::f64);
  z.backward(g);
  g.fill_(5.0);
  CHECK(z.grad().at(1) == 1.0);

  // An adopted gradient keeps accumulating across backward calls: d/dw Σ w² twice = 4w.
  Tensor w = random_leaf({4}, 8);
  sum(mul(w, w)).backward();
  sum(mul(w, w)).backward();
  require_close(w.grad(), scale(w, 4.0).detach(), 1e-15, 1e-15);
}

TEST_CASE("gradients accumulate into a leaf across backward calls", "[autograd][engine]") {
  Tensor x = random_leaf({3}, 3);
  sum(scale(x, 2.0)).backward();
  require_close(x.grad(), Tensor::full({3}, 2.0, DType::f64), 0, 0);
  sum(mul(x, x)).backward();
  require_close(x.grad(), add_scalar(scale(x, 2.0), 2.0).detach(), 1e-15, 1e-15);
  x.set_grad(Tensor());  // zeroing is the caller's job
  sum(x).backward();
  require_close(x.grad(), Tensor::ones({3}, DType::f64), 0, 0);
}

TEST_CASE("backward(grad) takes an outside gradient for a non-scalar output", "[autograd][engine]") {
  Tensor x = random_leaf({2, 3}, 4);
  const Tensor y = scale(x, 3.0);
  const Tensor g = random({2, 3}, 5);
  y.backward(g);
  require_close(x.grad(), scale(g, 3.0), 1e-15, 1e-15);

  Tensor z = random_leaf({2, 3}, 6);
  REQUIRE_THROWS_WITH(scale(z, 2.0).backward(), Catch::Contains("[2, 3]") && Catch::Contains("backward(grad)"));
  REQUIRE_THROWS_WITH(scale(z, 2.0).backward(random({3, 2}, 7)), Catch::Contains("[3, 2]"));
}

TEST_CASE("a graph is freed after backward unless retain_graph", "[autograd][engine]") {
  Tensor x = random_leaf({3}, 8);
  const Tensor y = sum(mul(x, x));
  y.backward();
  REQUIRE_THROWS_AS(y.backward(), Error);
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("retain_graph"));

  Tensor w = random_leaf({3}, 9);
  const Tensor z = sum(mul(w, w));
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  require_close(w.grad(), scale(w, 4.0).detach(), 1e-15, 1e-15);
}

TEST_CASE("NoGradGuard records nothing; detach cuts the graph", "[autograd][engine]") {
  Tensor x = random_leaf({2, 2}, 10);
  {
    NoGradGuard guard;
    const Tensor y = mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(y.grad_fn());
    CHECK(y.is_leaf());
  }
  CHECK(autograd::grad_enabled());
  CHECK(mul(x, x).grad_fn());

  // Only the path through the undetached x carries gradient: d/dx (c·x) = c.
  const Tensor c = x.detach();
  CHECK_FALSE(c.requires_grad());
  CHECK(c.shares_storage_with(x));
  sum(mul(c, x)).backward();
  require_close(x.grad(), c, 0, 0);
  REQUIRE_THROWS_WITH(sum(mul(c, c)).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("requires_grad propagates from any input that needs it", "[autograd][engine]") {
  Tensor a = random_leaf({3}, 11);
  const Tensor b = random({3}, 12);
  CHECK(a.requires_grad());
  CHECK(a.is_leaf());
  CHECK_FALSE(b.requires_grad());
  const Tensor ab = add(a, b), bb = mul(b, b);
  CHECK(ab.requires_grad());
  CHECK_FALSE(ab.is_leaf());
  CHECK(ab.grad_fn()->name() == "add");
  CHECK_FALSE(bb.requires_grad());
  CHECK_FALSE(bb.grad_fn());
  CHECK(gelu(ab).requires_grad());
  CHECK_FALSE(argmax(ab, 0).requires_grad());  // integer results never require grad
  Tensor non_leaf = ab;
  REQUIRE_THROWS_WITH(non_leaf.set_requires_grad(false), Catch::Contains("non-leaf"));
}

TEST_CASE("custom Functions via the subclass and the lambda API", "[autograd][function]") {
  Tensor x = random_leaf({2, 3}, 13);
  const Tensor y = square(x);
  CHECK(y.grad_fn()->name() == "Square");
  require_close(y, mul(x, x).detach(), 0, 0);
  sum(y).backward();
  require_close(x.grad(), scale(x, 2.0).detach(), 1e-15, 1e-15);
  require_gradcheck([](const TensorList& in) { return TensorList{square(in[0])}; }, {x});

  Tensor a = random_leaf({4}, 14), b = random_leaf({4}, 15);
  CHECK(mul_cube(a, b).grad_fn()->name() == "mul_cube");
  require_gradcheck([](const TensorList& in) { return TensorList{mul_cube(in[0], in[1])}; }, {a, b});
  // Only `a` needs a gradient: the lambda sees needs_input_grad(1) == false.
  const Tensor constant_b = b.detach();
  Tensor a2 = random_leaf({4}, 16);
  sum(mul_cube(a2, constant_b)).backward();
  REQUIRE(a2.grad().defined());
}

TEST_CASE("gradcheck catches a deliberately wrong backward", "[autograd][gradcheck]") {
  Tensor x = random_leaf({5}, 17);
  const auto result = autograd::gradcheck([](const TensorList& in) { return TensorList{square(in[0], 3.0)}; }, {x});
  CHECK_FALSE(result.ok);
  CHECK(result.message.find("analytic") != std::string::npos);
  CHECK(result.max_abs_error > 1e-3);
}

TEST_CASE("checkpoint gives the gradients of running the function directly", "[autograd][checkpoint]") {
  Tensor w = random_leaf({4, 3}, 18), bias = random_leaf({4}, 19);
  const auto block = [&](const TensorList& in) { return TensorList{mul(gelu(linear(in[0], w, bias)), in[1])}; };

  Tensor x = random_leaf({2, 3}, 20), s = random_leaf({2, 4}, 21);
  const Tensor g = random({2, 4}, 22);
  block({x, s})[0].backward(g);
  const Tensor dx = x.grad(), ds = s.grad(), dw = w.grad(), db = bias.grad();

  Tensor x2 = x.detach().clone().set_requires_grad(true), s2 = s.detach().clone().set_requires_grad(true);
  w.set_grad(Tensor());
  bias.set_grad(Tensor());
  const Tensor out = autograd::checkpoint(block, {x2, s2})[0];
  CHECK(out.grad_fn()->name() == "Checkpoint");
  require_close(out, block({x, s})[0].detach(), 0, 0);
  out.backward(g);
  require_close(x2.grad(), dx, 1e-15, 1e-14);
  require_close(s2.grad(), ds, 1e-15, 1e-14);
  require_close(w.grad(), dw, 1e-15, 1e-14);  // parameters get theirs during the recompute
  require_close(bias.grad(), db, 1e-15, 1e-14);
}

TEST_CASE("checkpoint replays dropout masks in the recompute", "[autograd][checkpoint]") {
  const auto block = [](const TensorList& in) { return TensorList{dropout(tanh(in[0]), 0.5, /*training=*/true)}; };
  Tensor x = random_leaf({6, 5}, 23);
  const Tensor g = random({6, 5}, 24);

  manual_seed(77);
  const Tensor direct = block({x})[0];
  direct.backward(g);
  const Tensor dx = x.grad();

  Tensor x2 = x.detach().clone().set_requires_grad(true);
  manual_seed(77);
  const Tensor out = autograd::checkpoint(block, {x2})[0];
  require_close(out, direct.detach(), 0, 0);
  (void)dropout(x2.detach(), 0.5, true);  // the generator moves on before backward
  out.backward(g);
  require_close(x2.grad(), dx, 0, 0);

  bool some_dropped = false;
  for (std::int64_t i = 0; i < out.numel(); ++i) some_dropped = some_dropped || out.at(i) == 0.0;
  CHECK(some_dropped);
}

// Regression: two roots that are outputs of the same node used to have that node's edges
// counted twice, so the leaves never became ready and got no gradient.
TEST_CASE("backward from several outputs of one node reaches the leaves once", "[autograd]") {
  Tensor x = Tensor::from_vector<double>({1.0, 2.0, 3.0}, {3}).set_requires_grad(true);
  auto outs = autograd::apply_function(
      "twice_and_thrice", {x},
      [](Context&, const autograd::TensorList& in) { return autograd::TensorList{scale(in[0], 2.0), scale(in[0], 3.0)}; },
      [](Context&, const autograd::TensorList& g) { return autograd::TensorList{add(scale(g[0], 2.0), scale(g[1], 3.0))}; });
  autograd::backward({outs[0], outs[1]}, {Tensor::ones({3}, DType::f64), Tensor::ones({3}, DType::f64)});
  REQUIRE(x.grad().defined());
  for (std::int64_t i = 0; i < 3; ++i) CHECK(x.grad().at(i) == 5.0);
}
