// Reductions over every dim (negative dims, keepdim), max's gradient routing, and sum_to_shape.
#include <catch2/catch.hpp>

#include "ops/ops_testing.h"
#include "wallfacer/ops/reduction.h"

using namespace wf;
using namespace wf::testing;

namespace {

const Shape kShape = {2, 3, 4};
const std::vector<std::int64_t> kDims = {0, 1, 2, -1, -2, -3};

// Reduces x over `dim` with fold(accumulated, value) starting from the first element; also
// returns the first index of the winner when track_argmax.
Tensor reduce_reference(const Tensor& x, std::int64_t dim, bool keepdim, bool mean, bool max_not_sum,
                        Tensor* argmax_out = nullptr) {
  const Shape& shape = x.shape();
  const std::int64_t d = normalize_dim(dim, x.dim());
  Shape kept = shape;
  kept[d] = 1;
  Shape out_shape = shape;
  if (keepdim) {
    out_shape[d] = 1;
  } else {
    out_shape.erase(out_shape.begin() + d);
  }
  Tensor out = Tensor::empty(out_shape, DType::f64);
  if (argmax_out) *argmax_out = Tensor::empty(out_shape, DType::i64);
  for (std::int64_t o = 0; o < out.numel(); ++o) {
    auto index = unravel(o, kept);
    double acc = 0, best = -1e300;
    std::int64_t arg = 0;
    for (std::int64_t k = 0; k < shape[d]; ++k) {
      index[d] = k;
      const double v = x.at(ravel(index, shape));
      acc += v;
      if (v > best) {
        best = v;
        arg = k;
      }
    }
    out.set(o, max_not_sum ? best : (mean ? acc / static_cast<double>(shape[d]) : acc));
    if (argmax_out) argmax_out->set(o, static_cast<double>(arg));
  }
  return out;
}

}  // namespace

TEST_CASE("sum and mean over all elements", "[ops][reduction]") {
  const Tensor x = random(kShape, 3);
  double total = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) total += x.at(i);
  const Tensor s = sum(x), m = mean(x);
  CHECK(s.dim() == 0);
  CHECK(s.item() == Approx(total).margin(1e-13));
  CHECK(m.item() == Approx(total / 24.0).margin(1e-14));
  CHECK(sum(random(kShape, 3, DType::f32)).dtype() == DType::f32);

  Tensor leaf = random_leaf(kShape, 4);
  require_gradcheck([](const TensorList& in) { return TensorList{sum(in[0])}; }, {leaf});
  require_gradcheck([](const TensorList& in) { return TensorList{mean(in[0])}; }, {leaf});
}

TEST_CASE("sum, mean and max over every dim, with and without keepdim", "[ops][reduction]") {
  const Tensor x = random(kShape, 5);
  for (std::int64_t dim : kDims) {
    for (bool keepdim : {false, true}) {
      INFO("dim " << dim << " keepdim " << keepdim);
      require_close(sum(x, dim, keepdim), reduce_reference(x, dim, keepdim, false, false), 1e-14, 1e-14);
      require_close(mean(x, dim, keepdim), reduce_reference(x, dim, keepdim, true, false), 1e-14, 1e-14);
      Tensor expected_arg;
      require_close(max(x, dim, keepdim), reduce_reference(x, dim, keepdim, false, true, &expected_arg), 0, 0);
      const Tensor arg = argmax(x, dim, keepdim);
      CHECK(arg.dtype() == DType::i64);
      require_close(arg, expected_arg, 0, 0);
    }
  }
}

TEST_CASE("sum, mean and max pass gradcheck over every dim", "[ops][reduction][gradcheck]") {
  Tensor x = random_leaf(kShape, 6);
  for (std::int64_t dim : kDims) {
    for (bool keepdim : {false, true}) {
      INFO("dim " << dim << " keepdim " << keepdim);
      require_gradcheck([&](const TensorList& in) { return TensorList{sum(in[0], dim, keepdim)}; }, {x});
      require_gradcheck([&](const TensorList& in) { return TensorList{mean(in[0], dim, keepdim)}; }, {x});
      require_gradcheck([&](const TensorList& in) { return TensorList{max(in[0], dim, keepdim)}; }, {x});
    }
  }
}

TEST_CASE("max sends the gradient to the first arg-max on ties", "[ops][reduction]") {
  Tensor x = Tensor::from_vector<double>({1, 3, 3, 2, 2, 0}, {2, 3});
  x.set_requires_grad(true);
  const Tensor y = max(x, 1);
  require_close(y, Tensor::from_vector<double>({3, 2}, {2}), 0, 0);
  y.backward(Tensor::from_vector<double>({10, 20}, {2}));
  require_close(x.grad(), Tensor::from_vector<double>({0, 10, 0, 20, 0, 0}, {2, 3}), 0, 0);
  require_close(argmax(x, 1), Tensor::from_vector<double>({1, 0}, {2}), 0, 0);
  CHECK_FALSE(argmax(x, 1).requires_grad());
}

TEST_CASE("sum_to_shape sums broadcast dims back and passes gradcheck", "[ops][reduction][gradcheck]") {
  const Tensor x = random(kShape, 8);
  const std::vector<Shape> targets = {{4}, {3, 1}, {1, 3, 1}, {2, 1, 4}, {1}, {}, {2, 3, 4}};
  for (const Shape& target : targets) {
    INFO("to " << shape_str(target));
    // Reference: every element of x lands on its broadcast source in the target.
    Tensor expected = Tensor::zeros(target, DType::f64);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t j = broadcast_source(unravel(i, kShape), target);
      expected.set(j, expected.at(j) + x.at(i));
    }
    require_close(sum_to_shape(x, target), expected, 1e-14, 1e-14);
    Tensor leaf = random_leaf(kShape, 9);
    require_gradcheck([&](const TensorList& in) { return TensorList{sum_to_shape(in[0], target)}; }, {leaf});
  }
  CHECK(sum_to_shape(x, kShape).is_same(x));  // nothing to sum: no copy
  REQUIRE_THROWS_WITH(sum_to_shape(x, {3}), Catch::Contains("[2, 3, 4]") && Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(sum_to_shape(x, {1, 2, 3, 4}), Catch::Contains("[1, 2, 3, 4]"));
}

TEST_CASE("reduction errors", "[ops][reduction][errors]") {
  const Tensor x = random(kShape, 1);
  REQUIRE_THROWS_WITH(sum(x, 3), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(mean(x, -4), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(max(Tensor::zeros({2, 0}, DType::f64), 1), Catch::Contains("[2, 0]"));
  REQUIRE_THROWS_WITH(sum(Tensor::zeros({2}, DType::i32)), Catch::Contains("i32"));
}
