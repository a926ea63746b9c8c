// Broadcasting arithmetic: values against per-element loops, gradients against central
// differences, bf16 rounding, and error messages.
#include <catch2/catch.hpp>

#include <functional>

#include "ops/ops_testing.h"
#include "wallfacer/ops/arithmetic.h"

using namespace wf;
using namespace wf::testing;

namespace {

// Shape pairs that exercise broadcasting in both directions, rank padding and 0-dim operands.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {{2, 3}, {2, 3}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{4}, {2, 3, 4}}, {{}, {2, 3}}, {{2, 3}, {}},
};

// out[i] = f(a[broadcast i], b[broadcast i]), the reference for every binary op.
Tensor reference_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape, DType::f64);
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const auto index = unravel(i, out_shape);
    out.set(i, f(a.at(broadcast_source(index, a.shape())), b.at(broadcast_source(index, b.shape()))));
  }
  return out;
}

// Values bounded away from zero, for divisors.
Tensor away_from_zero(const Shape& shape, std::uint64_t seed) {
  Tensor t = random(shape, seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, (t.at(i) >= 0 ? 1.0 : -1.0) * (0.5 + std::abs(t.at(i))));
  return t;
}

struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  std::function<double(double, double)> reference;
};
const std::vector<BinaryCase> kBinaryOps = {
    {"add", add, [](double x, double y) { return x + y; }},
    {"sub", sub, [](double x, double y) { return x - y; }},
    {"mul", mul, [](double x, double y) { return x * y; }},
    {"div", div, [](double x, double y) { return x / y; }},
};

}  // namespace

TEST_CASE("broadcast_shapes follows NumPy rules and names both shapes on failure", "[ops][arithmetic]") {
  CHECK(broadcast_shapes({2, 3, 4}, {4}) == Shape{2, 3, 4});
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {5}) == Shape{5});
  CHECK(broadcast_shapes({1}, {0}) == Shape{0});
  REQUIRE_THROWS_AS(broadcast_shapes({2, 3}, {4}), Error);
  REQUIRE_THROWS_WITH(broadcast_shapes({2, 3}, {4}), Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
}

TEST_CASE("binary ops match a per-element loop under broadcasting", "[ops][arithmetic]") {
  for (const auto& c : kBinaryOps) {
    for (const auto& [sa, sb] : kShapePairs) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      const Tensor a = random(sa, 11), b = away_from_zero(sb, 12);
      require_close(c.op(a, b), reference_binary(a, b, c.reference), 1e-14, 1e-14);
    }
  }
}

TEST_CASE("binary ops compute f32 natively", "[ops][arithmetic]") {
  const Tensor a = random({2, 3, 4}, 1, DType::f32), b = random({3, 1}, 2, DType::f32);
  const Tensor y = mul(a, b);
  CHECK(y.dtype() == DType::f32);
  require_close(y, reference_binary(a, b, [](double x, double z) { return double(float(x) * float(z)); }), 0, 0);
}

TEST_CASE("binary ops pass gradcheck, including broadcast operands", "[ops][arithmetic][gradcheck]") {
  for (const auto& c : kBinaryOps) {
    for (const auto& [sa, sb] : kShapePairs) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = random_leaf(sa, 21), b = away_from_zero(sb, 22);
      b.set_requires_grad(true);
      require_gradcheck([&](const TensorList& in) { return TensorList{c.op(in[0], in[1])}; }, {a, b});
    }
  }
}

TEST_CASE("a gradient is computed only for operands that need one", "[ops][arithmetic]") {
  Tensor a = random_leaf({2, 3}, 1);
  const Tensor b = random({3}, 2);
  mul(a, b).backward(Tensor::ones({2, 3}, DType::f64));
  REQUIRE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  require_close(a.grad(), reference_binary(Tensor::ones({2, 3}, DType::f64), b, [](double, double y) { return y; }));
}

TEST_CASE("operators are the named ops", "[ops][arithmetic]") {
  const Tensor a = random({2, 3}, 1), b = away_from_zero({3}, 2);
  require_close(a + b, add(a, b), 0, 0);
  require_close(a - b, sub(a, b), 0, 0);
  require_close(a * b, mul(a, b), 0, 0);
  require_close(a / b, div(a, b), 0, 0);
  require_close(-a, neg(a), 0, 0);
  require_close(a * 2.5, scale(a, 2.5), 0, 0);
  require_close(2.5 * a, scale(a, 2.5), 0, 0);
}

TEST_CASE("neg, scale and add_scalar: values and gradcheck", "[ops][arithmetic][gradcheck]") {
  const Tensor x = random({2, 3, 2}, 5);
  const auto expect = [&](const Tensor& y, double alpha, double shift) {
    for (std::int64_t i = 0; i < x.numel(); ++i) REQUIRE(y.at(i) == Approx(alpha * x.at(i) + shift).margin(1e-15));
  };
  expect(neg(x), -1.0, 0.0);
  expect(scale(x, 0.75), 0.75, 0.0);
  expect(add_scalar(x, -1.5), 1.0, -1.5);
  Tensor leaf = random_leaf({2, 3, 2}, 6);
  require_gradcheck([](const TensorList& in) { return TensorList{neg(in[0])}; }, {leaf});
  require_gradcheck([](const TensorList& in) { return TensorList{scale(in[0], -3.0)}; }, {leaf});
  require_gradcheck([](const TensorList& in) { return TensorList{add_scalar(in[0], 4.0)}; }, {leaf});
}

TEST_CASE("bias_residual_add equals x + bias + residual and passes gradcheck", "[ops][arithmetic][gradcheck]") {
  Tensor x = random_leaf({2, 3, 4}, 1), bias = random_leaf({4}, 2), residual = random_leaf({2, 3, 4}, 3);
  require_close(bias_residual_add(x, bias, residual), add(add(x, bias), residual), 1e-15, 1e-15);
  require_gradcheck([](const TensorList& in) { return TensorList{bias_residual_add(in[0], in[1], in[2])}; },
                    {x, bias, residual});
  REQUIRE_THROWS_WITH(bias_residual_add(x, random({3}, 4), residual), Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(bias_residual_add(x, bias, random({2, 4}, 4)), Catch::Contains("[2, 4]"));
}

TEST_CASE("bf16 inputs compute in f32 and round the result once", "[ops][arithmetic][bf16]") {
  const Tensor a = random({3, 5}, 31, DType::bf16), b = random({5}, 32, DType::bf16);
  for (const auto& c : kBinaryOps) {
    INFO(c.name);
    const Tensor y = c.op(a, b);
    REQUIRE(y.dtype() == DType::bf16);
    const Tensor expected = reference_binary(a, b, [&](double x, double z) {
      const float exact = static_cast<float>(c.reference(static_cast<float>(x), static_cast<float>(z)));
      return static_cast<double>(bf16_to_float(float_to_bf16(exact)));
    });
    require_close(y, expected, 0, 0);
  }
  // Gradients come back in bf16 too.
  Tensor leaf = a.clone();
  leaf.set_requires_grad(true);
  add(leaf, b).backward(Tensor::ones({3, 5}, DType::bf16));
  CHECK(leaf.grad().dtype() == DType::bf16);
  require_close(leaf.grad(), Tensor::ones({3, 5}, DType::f64), 0, 0);
}

TEST_CASE("arithmetic errors name the shapes and dtypes involved", "[ops][arithmetic][errors]") {
  const Tensor a = random({2, 3}, 1), b = random({4}, 2);
  REQUIRE_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(mul(a, random({3, 2}, 3)), Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));
  REQUIRE_THROWS_WITH(sub(a, random({2, 3}, 3, DType::f32)), Catch::Contains("f64") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(add(a, Tensor()), Catch::Contains("undefined"));
  REQUIRE_THROWS_WITH(add(Tensor::zeros({2}, DType::i64), Tensor::zeros({2}, DType::i64)), Catch::Contains("i64"));
}
