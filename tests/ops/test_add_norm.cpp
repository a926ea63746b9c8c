// add_layer_norm and add_rms_norm (the residual add fused into the norm): outputs and every gradient
// bit for bit those of add() followed by layer_norm() / rms_norm() in f32, f64 and bf16, with and
// without a second use of the sum; gradients against central differences (f64 gradcheck); errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "ops/ops_testing.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

enum class Kind { layer, rms };

Tensor leaf(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = random(shape, seed, dtype);
  t.set_requires_grad(true);
  return t;
}

// {sum, y, then the gradients of x, branch, weight (and bias)} for the loss Σ y·gy, plus Σ sum·gs
// when the sum has a second use (as the next residual add gives it).
TensorList run(bool fused, Kind kind, DType dtype, bool second_use) {
  const Shape shape{3, 5, 37};
  const Tensor x = leaf(shape, 1, dtype), branch = leaf(shape, 2, dtype);
  const Tensor w = leaf({37}, 3, dtype), b = leaf({37}, 4, dtype);
  AddNorm out;
  if (fused) {
    out = kind == Kind::layer ? add_layer_norm(x, branch, w, b) : add_rms_norm(x, branch, w);
  } else {
    out.sum = add(x, branch);
    out.y = kind == Kind::layer ? layer_norm(out.sum, w, b) : rms_norm(out.sum, w);
  }
  Tensor loss = sum(mul(out.y, random(shape, 5, dtype)));
  if (second_use) loss = add(loss, sum(mul(out.sum, random(shape, 6, dtype))));
  loss.backward();
  TensorList result{out.sum.detach(), out.y.detach(), x.grad(), branch.grad(), w.grad()};
  if (kind == Kind::layer) result.push_back(b.grad());
  return result;
}

}  // namespace

TEST_CASE("add_layer_norm and add_rms_norm are bitwise add then the norm, gradients included", "[ops][norm]") {
  for (const Kind kind : {Kind::layer, Kind::rms}) {
    for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      for (const bool second_use : {true, false}) {
        CAPTURE(kind == Kind::layer, dtype_name(dtype), second_use);
        const TensorList got = run(true, kind, dtype, second_use), want = run(false, kind, dtype, second_use);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          require_bitwise(got[i], want[i]);
        }
      }
    }
  }
}

TEST_CASE("add_layer_norm and add_rms_norm gradients pass gradcheck", "[ops][norm][gradcheck]") {
  const Tensor x = random_leaf({2, 3, 6}, 11), branch = random_leaf({2, 3, 6}, 12);
  const Tensor w = random_leaf({6}, 13), b = random_leaf({6}, 14);
  require_gradcheck(
      [](const TensorList& in) {
        const AddNorm r = add_layer_norm(in[0], in[1], in[2], in[3]);
        return TensorList{r.sum, r.y};
      },
      {x, branch, w, b});
  require_gradcheck(
      [](const TensorList& in) {
        const AddNorm r = add_rms_norm(in[0], in[1], in[2]);
        return TensorList{r.sum, r.y};
      },
      {x, branch, w});
  // Only the branch trains (x constant), and no affine parameters.
  require_gradcheck(
      [](const TensorList& in) {
        const AddNorm r = add_layer_norm(in[0], in[1], Tensor(), Tensor());
        return TensorList{r.y};
      },
      {x.detach(), branch});
}

TEST_CASE("add_layer_norm and add_rms_norm name a branch that does not match x", "[ops][norm][errors]") {
  const Tensor x = random({2, 4}, 21, DType::f32);
  REQUIRE_THROWS_WITH(add_layer_norm(x, random({1, 4}, 22, DType::f32), Tensor(), Tensor()),
                      Catch::Contains("branch has shape [1, 4]") && Catch::Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(add_rms_norm(x, random({2, 4}, 23, DType::f64), Tensor()),
                      Catch::Contains("f64") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(add_rms_norm(x, x, random({3}, 24, DType::f32)), Catch::Contains("weight has shape [3]"));
}
