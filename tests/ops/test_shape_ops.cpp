// Shape ops: views where promised, copies elsewhere, values against index loops, gradcheck.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ops/ops_testing.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

const Shape kShape = {2, 3, 4};

Tensor permute_reference(const Tensor& x, const std::vector<std::int64_t>& dims) {
  Shape out_shape;
  for (auto d : dims) out_shape.push_back(x.shape()[d]);
  Tensor out = Tensor::empty(out_shape, x.dtype());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const auto oi = unravel(i, out_shape);
    std::vector<std::int64_t> xi(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) xi[dims[d]] = oi[d];
    out.set(i, x.at(ravel(xi, x.shape())));
  }
  return out;
}

Tensor narrow_reference(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  Shape out_shape = x.shape();
  out_shape[dim] = length;
  Tensor out = Tensor::empty(out_shape, x.dtype());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    auto index = unravel(i, out_shape);
    index[dim] += start;
    out.set(i, x.at(ravel(index, x.shape())));
  }
  return out;
}

}  // namespace

TEST_CASE("reshape is a view and its gradient takes the input's shape", "[ops][shape]") {
  Tensor x = random_leaf(kShape, 1);
  const Tensor y = reshape(x, {4, -1});
  CHECK(y.shape() == Shape{4, 6});
  CHECK(y.shares_storage_with(x));
  require_close(y.view(kShape), x, 0, 0);
  require_gradcheck([](const TensorList& in) { return TensorList{reshape(in[0], {6, 4})}; }, {x});
  REQUIRE_THROWS_WITH(reshape(x, {5, 5}), Catch::Contains("[5, 5]") && Catch::Contains("[2, 3, 4]"));
}

TEST_CASE("flatten merges a range of dims", "[ops][shape]") {
  const Tensor x = random(kShape, 2);
  CHECK(flatten(x).shape() == Shape{24});
  CHECK(flatten(x, 1).shape() == Shape{2, 12});
  CHECK(flatten(x, 0, 1).shape() == Shape{6, 4});
  CHECK(flatten(x, -2, -1).shape() == Shape{2, 12});
  CHECK(flatten(x, 1, 1).shape() == kShape);
  CHECK(flatten(Tensor::scalar(1.0, DType::f64)).shape() == Shape{1});
  REQUIRE_THROWS_WITH(flatten(x, 2, 1), Catch::Contains("[2, 3, 4]"));
  Tensor leaf = random_leaf(kShape, 3);
  require_gradcheck([](const TensorList& in) { return TensorList{flatten(in[0], 1)}; }, {leaf});
}

TEST_CASE("permute and transpose match index loops and pass gradcheck", "[ops][shape][gradcheck]") {
  const Tensor x = random(kShape, 4);
  Tensor leaf = random_leaf(kShape, 5);
  std::vector<std::int64_t> dims = {0, 1, 2};
  do {
    INFO("dims " << dims[0] << dims[1] << dims[2]);
    require_close(permute(x, dims), permute_reference(x, dims), 0, 0);
    require_gradcheck([&](const TensorList& in) { return TensorList{permute(in[0], dims)}; }, {leaf});
  } while (std::next_permutation(dims.begin(), dims.end()));
  require_close(permute(x, {-1, 0, -2}), permute_reference(x, {2, 0, 1}), 0, 0);

  const Tensor x4 = random({2, 1, 3, 2}, 6);
  require_close(transpose(x4, 1, 2), permute_reference(x4, {0, 2, 1, 3}), 0, 0);
  require_close(transpose(x4, -1, 0), permute_reference(x4, {3, 1, 2, 0}), 0, 0);
  require_close(transpose(x, 1, 1), x, 0, 0);
  require_gradcheck([](const TensorList& in) { return TensorList{transpose(in[0], 0, 2)}; }, {leaf});

  REQUIRE_THROWS_WITH(permute(x, {0, 1}), Catch::Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(permute(x, {0, 1, 1}), Catch::Contains("repeat"));
  REQUIRE_THROWS_WITH(permute(x, {0, 1, 3}), Catch::Contains("out of range"));
}

TEST_CASE("narrow: a view on dim 0, a copy elsewhere, gradient zero-padded", "[ops][shape][gradcheck]") {
  const Tensor x = random(kShape, 7);
  const Tensor rows = narrow(x, 0, 1, 1);
  CHECK(rows.shares_storage_with(x));
  require_close(rows, narrow_reference(x, 0, 1, 1), 0, 0);
  require_close(narrow(x, 1, 1, 2), narrow_reference(x, 1, 1, 2), 0, 0);
  require_close(narrow(x, -1, 0, 3), narrow_reference(x, 2, 0, 3), 0, 0);
  CHECK_FALSE(narrow(x, 2, 1, 2).shares_storage_with(x));

  Tensor leaf = random_leaf(kShape, 8);
  for (std::int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    require_gradcheck([&](const TensorList& in) { return TensorList{narrow(in[0], dim, 1, 1)}; }, {leaf});
  }
  Tensor g = random_leaf(kShape, 9);
  narrow(g, 1, 1, 2).backward(Tensor::ones({2, 2, 4}, DType::f64));
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    const auto index = unravel(i, kShape);
    REQUIRE(g.grad().at(i) == (index[1] >= 1 ? 1.0 : 0.0));
  }
  REQUIRE_THROWS_WITH(narrow(x, 1, 2, 2), Catch::Contains("[2, 4)") && Catch::Contains("[2, 3, 4]"));
}

TEST_CASE("cat along every dim matches narrow and passes gradcheck", "[ops][shape][gradcheck]") {
  for (std::int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    const std::int64_t d = normalize_dim(dim, 3);
    Shape sa = kShape, sb = kShape;
    sa[d] = 1;
    sb[d] = 2;
    Tensor a = random_leaf(sa, 10), b = random_leaf(sb, 11), c = random_leaf(kShape, 12);
    const Tensor y = cat({a, b, c}, dim);
    Shape expected = kShape;
    expected[d] += 3;
    REQUIRE(y.shape() == expected);
    require_close(narrow(y, d, 0, 1), a, 0, 0);
    require_close(narrow(y, d, 1, 2), b, 0, 0);
    require_close(narrow(y, d, 3, kShape[d]), c, 0, 0);
    require_gradcheck([&](const TensorList& in) { return TensorList{cat({in[0], in[1], in[2]}, dim)}; }, {a, b, c});
  }
  const Tensor a = random({2, 3}, 1);
  REQUIRE_THROWS_WITH(cat({a, random({2, 4}, 2)}, 0), Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(cat({a, random({2, 3}, 2, DType::f32)}, 1), Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(cat({}, 0), Catch::Contains("at least one"));
}

TEST_CASE("split into chunks, the last one shorter", "[ops][shape][gradcheck]") {
  const Tensor x = random({5, 2}, 13);
  const auto parts = split(x, 2, 0);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[2].shape() == Shape{1, 2});
  require_close(cat(parts, 0), x, 0, 0);
  const auto cols = split(random(kShape, 14), 2, -1);
  REQUIRE(cols.size() == 2);
  CHECK(cols[1].shape() == Shape{2, 3, 2});

  Tensor leaf = random_leaf(kShape, 15);
  require_gradcheck([](const TensorList& in) { return split(in[0], 2, 2); }, {leaf});
  require_gradcheck([](const TensorList& in) { return split(in[0], 2, 1); }, {leaf});
  REQUIRE_THROWS_WITH(split(x, 0, 0), Catch::Contains("positive"));
}

TEST_CASE("shape ops move any dtype", "[ops][shape]") {
  const Tensor ids = Tensor::arange(0, 24, 1, DType::i64).view(kShape);
  require_close(permute(ids, {2, 0, 1}), permute_reference(ids, {2, 0, 1}), 0, 0);
  require_close(narrow(ids, 2, 1, 2), narrow_reference(ids, 2, 1, 2), 0, 0);
  CHECK(cat({ids, ids}, 1).dtype() == DType::i64);
  const Tensor h = random(kShape, 16, DType::bf16);
  const Tensor ht = transpose(h, 0, 2);
  CHECK(ht.dtype() == DType::bf16);
  require_close(ht, permute_reference(h, {2, 1, 0}), 0, 0);
  CHECK_FALSE(permute(ids, {1, 0, 2}).requires_grad());
}

TEST_CASE("cast converts values both ways and casts the gradient back", "[ops][shape]") {
  Tensor x = random_leaf({3, 4}, 17);
  const Tensor y32 = cast(x, DType::f32);
  CHECK(y32.dtype() == DType::f32);
  CHECK(y32.requires_grad());
  const Tensor back = cast(y32, DType::f64);
  CHECK(back.dtype() == DType::f64);
  for (std::int64_t i = 0; i < x.numel(); ++i) REQUIRE(back.at(i) == static_cast<double>(static_cast<float>(x.at(i))));
  CHECK(cast(x, DType::f64).is_same(x));

  const Tensor g = random({3, 4}, 18);
  back.backward(g);
  REQUIRE(x.grad().dtype() == DType::f64);
  for (std::int64_t i = 0; i < g.numel(); ++i) REQUIRE(x.grad().at(i) == static_cast<double>(static_cast<float>(g.at(i))));

  // Through f32 the function is the identity up to f32 rounding: a coarse step sees slope 1.
  autograd::GradcheckOptions coarse;
  coarse.eps = 1e-3;
  coarse.atol = 1e-3;
  coarse.rtol = 1e-3;
  require_gradcheck([](const TensorList& in) { return TensorList{cast(cast(in[0], DType::f32), DType::f64)}; }, {x},
                    coarse);
  // Gradients never flow into integers.
  CHECK_FALSE(cast(x, DType::i64).requires_grad());
}
