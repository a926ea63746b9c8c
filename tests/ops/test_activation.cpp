// Pointwise activations, softmax over every dim, and dropout's mask semantics.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

double gelu_reference(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double silu_reference(double x) { return x / (1.0 + std::exp(-x)); }

struct PointwiseCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  std::function<double(double)> reference;
  bool positive_inputs;  // ln
};
const std::vector<PointwiseCase> kPointwise = {
    {"gelu", gelu, gelu_reference, false},
    {"silu", silu, silu_reference, false},
    {"exp", exp, [](double x) { return std::exp(x); }, false},
    {"ln", ln, [](double x) { return std::log(x); }, true},
    {"tanh", tanh, [](double x) { return std::tanh(x); }, false},
};

Tensor input_for(const PointwiseCase& c, const Shape& shape, std::uint64_t seed) {
  Tensor x = random(shape, seed);
  if (c.positive_inputs) {
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.2 + std::abs(x.at(i)));
  }
  return x;
}

// softmax (or log_softmax) along `dim` by direct loops over each line of that dim.
Tensor softmax_reference(const Tensor& x, std::int64_t dim, bool log) {
  const Shape& shape = x.shape();
  const std::int64_t d = normalize_dim(dim, x.dim());
  Tensor out = Tensor::empty(shape, DType::f64);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto index = unravel(i, shape);
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t k = 0; k < shape[d]; ++k) {
      index[d] = k;
      m = std::max(m, x.at(ravel(index, shape)));
    }
    double total = 0;
    for (std::int64_t k = 0; k < shape[d]; ++k) {
      index[d] = k;
      total += std::exp(x.at(ravel(index, shape)) - m);
    }
    const double xi = x.at(i);
    out.set(i, log ? xi - m - std::log(total) : std::exp(xi - m) / total);
  }
  return out;
}

}  // namespace

TEST_CASE("pointwise activations match their formulas", "[ops][activation]") {
  for (const auto& c : kPointwise) {
    INFO(c.name);
    const Tensor x = input_for(c, {3, 7}, 3);
    const Tensor y = c.op(x);
    Tensor expected = Tensor::empty(x.shape(), DType::f64);
    for (std::int64_t i = 0; i < x.numel(); ++i) expected.set(i, c.reference(x.at(i)));
    require_close(y, expected, 1e-14, 1e-13);

    const Tensor y32 = c.op(x.to(DType::f32));
    CHECK(y32.dtype() == DType::f32);
    require_close(y32, expected, 1e-6, 1e-6);
  }
}

TEST_CASE("pointwise activations pass gradcheck", "[ops][activation][gradcheck]") {
  for (const auto& c : kPointwise) {
    INFO(c.name);
    Tensor x = input_for(c, {2, 3, 4}, 7);
    x.set_requires_grad(true);
    require_gradcheck([&](const TensorList& in) { return TensorList{c.op(in[0])}; }, {x});
  }
}

TEST_CASE("bf16 gelu computes in f32 and rounds once", "[ops][activation][bf16]") {
  const Tensor x = random({4, 9}, 41, DType::bf16);
  const Tensor y = gelu(x);
  REQUIRE(y.dtype() == DType::bf16);
  const std::vector<bf16> xs = x.to_vector<bf16>(), ys = y.to_vector<bf16>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    // The f32 formula of the kernel, then one rounding to bf16.
    const float xf = bf16_to_float(xs[i]);
    const float k = 0.7978845608028654f, t = std::tanh(k * (xf + 0.044715f * xf * xf * xf));
    const float exact = 0.5f * xf * (1.0f + t);
    INFO("x = " << xf);
    REQUIRE(ys[i].bits == float_to_bf16(exact).bits);
  }
}

TEST_CASE("softmax and log_softmax match loops along every dim", "[ops][activation]") {
  const Tensor x = random({2, 3, 4}, 17);
  for (std::int64_t dim : {0, 1, 2, -1, -2, -3}) {
    INFO("dim " << dim);
    require_close(softmax(x, dim), softmax_reference(x, dim, false), 1e-14, 1e-13);
    require_close(log_softmax(x, dim), softmax_reference(x, dim, true), 1e-14, 1e-13);
    const Tensor total = sum(softmax(x, dim), dim);
    require_close(total, Tensor::ones(total.shape(), DType::f64), 1e-14, 0);
  }
  REQUIRE_THROWS_WITH(softmax(x, 3), Catch::Contains("out of range"));
}

TEST_CASE("softmax and log_softmax pass gradcheck along every dim", "[ops][activation][gradcheck]") {
  Tensor x = random_leaf({2, 3, 4}, 19);
  for (std::int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    require_gradcheck([&](const TensorList& in) { return TensorList{softmax(in[0], dim)}; }, {x});
    require_gradcheck([&](const TensorList& in) { return TensorList{log_softmax(in[0], dim)}; }, {x});
  }
}

TEST_CASE("dropout is the identity when p == 0 or not training", "[ops][activation][dropout]") {
  Tensor x = random_leaf({4, 5}, 1);
  Generator gen(3);
  const Tensor eval = dropout(x, 0.5, false, &gen);
  const Tensor p0 = dropout(x, 0.0, true, &gen);
  require_close(eval, x, 0, 0);
  require_close(p0, x, 0, 0);
  CHECK(gen.offset() == 0);  // no randomness consumed
  sum(eval).backward();
  require_close(x.grad(), Tensor::ones({4, 5}, DType::f64), 0, 0);
}

TEST_CASE("dropout zeroes a fraction p and scales survivors by 1/(1-p)", "[ops][activation][dropout]") {
  const double p = 0.3;
  const Tensor x = Tensor::ones({200, 100}, DType::f32);
  Generator gen(11);
  const Tensor y = dropout(x, p, true, &gen);
  CHECK(gen.offset() == static_cast<std::uint64_t>(x.numel()));
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double v = y.at(i);
    if (v == 0.0) {
      ++zeros;
    } else {
      REQUIRE(v == Approx(1.0 / (1.0 - p)).epsilon(1e-6));
    }
  }
  // 20000 Bernoulli(0.3) draws: the standard deviation of the fraction is ~0.0032.
  CHECK(static_cast<double>(zeros) / static_cast<double>(y.numel()) == Approx(p).margin(0.015));
  // Mean is preserved in expectation.
  CHECK(mean(y).item() == Approx(1.0).margin(0.03));

  REQUIRE(dropout(x, 1.0, true, &gen).to_vector<float>() == std::vector<float>(x.numel(), 0.0f));
  REQUIRE_THROWS_WITH(dropout(x, 1.5, true, &gen), Catch::Contains("1.5"));
  REQUIRE_THROWS_WITH(dropout(x, -0.1, true, &gen), Catch::Contains("-0.1"));
}

TEST_CASE("dropout: same generator state, same mask; backward uses the forward's mask", "[ops][activation][dropout]") {
  const double p = 0.4;
  Tensor x = Tensor::full({6, 7}, 2.0, DType::f64);
  x.set_requires_grad(true);
  Generator gen(99);
  const Generator::State start = gen.state();
  const Tensor y1 = dropout(x, p, true, &gen);
  const Tensor y_next = dropout(x, p, true, &gen);
  gen.set_state(start);
  const Tensor y2 = dropout(x, p, true, &gen);
  require_close(y2, y1, 0, 0);
  bool differs = false;
  for (std::int64_t i = 0; i < y1.numel(); ++i) differs = differs || (y1.at(i) != y_next.at(i));
  CHECK(differs);  // the generator moved on

  // The generator advances between forward and backward; the gradient must not notice.
  (void)dropout(x, p, true, &gen);
  y1.backward(Tensor::ones({6, 7}, DType::f64));
  for (std::int64_t i = 0; i < y1.numel(); ++i) {
    REQUIRE(x.grad().at(i) == (y1.at(i) == 0.0 ? 0.0 : 1.0 / (1.0 - p)));
  }
}

TEST_CASE("dropout passes gradcheck with a fixed mask", "[ops][activation][dropout][gradcheck]") {
  Tensor x = random_leaf({3, 8}, 5);
  require_gradcheck(
      [](const TensorList& in) {
        Generator gen(2024);  // fresh each evaluation: every evaluation draws the same mask
        return TensorList{dropout(in[0], 0.35, true, &gen)};
      },
      {x});
}

TEST_CASE("dropout defaults to the process generator", "[ops][activation][dropout]") {
  const Tensor x = Tensor::ones({5, 5}, DType::f64);
  manual_seed(123);
  const Tensor a = dropout(x, 0.5, true);
  manual_seed(123);
  const Tensor b = dropout(x, 0.5, true);
  require_close(a, b, 0, 0);
}

TEST_CASE("dropout_slice draws exactly its slice of the whole tensor's mask", "[ops][activation][dropout]") {
  const double p = 0.3;
  const Shape whole_shape{3, 8, 5};
  const Tensor whole = Tensor::randn_at(whole_shape, 41, 0, DType::f64);
  for (const std::int64_t dim : {0, 1, -1}) {
    for (const int parts : {1, 2, 4}) {
      const std::int64_t d = normalize_dim(dim, 3);
      if (whole_shape[static_cast<std::size_t>(d)] % parts != 0) continue;
      INFO("dim " << dim << ", " << parts << " parts");
      const std::int64_t k = whole_shape[static_cast<std::size_t>(d)] / parts;
      Generator whole_gen(7);
      whole_gen.advance(13);  // any position: the slices must follow the whole draw from there
      const Generator::State start = whole_gen.state();
      const Tensor expected = dropout(whole, p, true, &whole_gen);
      for (int index = 0; index < parts; ++index) {
        Generator gen(7);
        gen.set_state(start);
        Tensor x = narrow(whole, d, index * k, k).clone();
        x.set_requires_grad(true);
        const Tensor y = dropout_slice(x, p, true, dim, parts, index, &gen);
        require_close(y, narrow(expected, d, index * k, k), 0, 0);
        CHECK(gen.offset() == whole_gen.offset());  // in step with the whole tensor's draw
        // The backward masks with the forward's slice: the gradient of sum(y) is y / x.
        sum(y).backward();
        const Tensor kept = narrow(expected, d, index * k, k);
        for (std::int64_t i = 0; i < y.numel(); ++i) {
          REQUIRE(x.grad().at(i) == (kept.at(i) == 0.0 ? 0.0 : 1.0 / (1.0 - p)));
        }
      }
    }
  }
  Generator gen(1);
  CHECK_THROWS_WITH(dropout_slice(whole, p, true, 3, 2, 0, &gen), Catch::Contains("dim 3 is out of range"));
  CHECK_THROWS_WITH(dropout_slice(whole, p, true, 1, 2, 2, &gen), Catch::Contains("slice 2 of 2"));
}
