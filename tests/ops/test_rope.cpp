// rope: forward against the f64 kernel reference with scattered (zigzag-like) positions,
// gradcheck in f64 (the backward is the inverse rotation), relative positions
// (<rope(q, m), rope(k, n)> depends only on m − n), i32 positions, bf16, per-row positions, and
// errors.
#include <catch2/catch.hpp>

#include "kernels/cpu/rope.h"
#include "ops/ops_testing.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

Tensor positions_of(const std::vector<std::int64_t>& p) {
  return Tensor::from_vector<std::int64_t>(p, {static_cast<std::int64_t>(p.size())});
}

}  // namespace

TEST_CASE("rope matches the reference kernel for scattered positions", "[ops][rope]") {
  const Tensor x = random({2, 4, 3, 6}, 1);
  const Tensor pos = positions_of({0, 7, 1, 6});  // zigzag: chunks 0 and 3 of 4, two tokens each
  for (const double theta : {10000.0, 500000.0}) {
    Tensor expected = Tensor::empty(x.shape(), DType::f64);
    kernels::cpu::rope_reference<double>({2, 4, 3, 6, theta}, x.data<double>(), pos.data<std::int64_t>(), false,
                                         expected.data<double>());
    require_close(rope(x, pos, theta), expected, 1e-13, 1e-12);
    require_close(rope(x, pos.to(DType::i32), theta), expected, 1e-13, 1e-12);
  }
  // Position 0 is the identity; f32 and bf16 follow f64 within their rounding.
  require_close(rope(x, Tensor::zeros({4}, DType::i64)), x, 0, 0);
  const Tensor y64 = rope(x, pos);
  require_close(rope(x.to(DType::f32), pos).to(DType::f64), y64, 1e-5, 1e-5);
  const Tensor y16 = rope(x.to(DType::bf16), pos);
  REQUIRE(y16.dtype() == DType::bf16);
  require_close(y16.to(DType::f64), y64, 3e-2, 1e-2);
}

TEST_CASE("rope gradients (f64 gradcheck) and relative-position property", "[ops][rope]") {
  const Tensor pos = positions_of({5, 2, 11, 0, 3});
  require_gradcheck([&](const TensorList& in) { return TensorList{rope(in[0], pos, 100.0)}; },
                    {random_leaf({2, 5, 2, 4}, 2)});

  // <rope(q, m), rope(k, n)> = <rope(q, m + s), rope(k, n + s)>: attention scores see only
  // the distance between tokens.
  const Tensor q = random({1, 1, 1, 8}, 3), k = random({1, 1, 1, 8}, 4);
  const auto score = [&](std::int64_t m, std::int64_t n) {
    return sum(mul(rope(q, positions_of({m})), rope(k, positions_of({n})))).item();
  };
  CHECK(score(9, 4) == Approx(score(109, 104)).epsilon(1e-12));
  CHECK(score(9, 4) != Approx(score(9, 5)).epsilon(1e-6));
}

TEST_CASE("rope: per-row positions [batch, tokens] rotate each row by its own (packed documents)", "[ops][rope]") {
  const Tensor x = random({2, 4, 3, 6}, 8);
  const std::vector<std::vector<std::int64_t>> rows = {{0, 1, 0, 1}, {2, 0, 5, 3}};
  const Tensor per_row = Tensor::from_vector<std::int64_t>({0, 1, 0, 1, 2, 0, 5, 3}, {2, 4});
  const Tensor y = rope(x, per_row);
  for (std::int64_t b = 0; b < 2; ++b) {
    require_close(y.slice0(b, b + 1), rope(x.slice0(b, b + 1), positions_of(rows[static_cast<std::size_t>(b)])), 0, 0);
  }
  require_gradcheck([&](const TensorList& in) { return TensorList{rope(in[0], per_row, 100.0)}; },
                    {random_leaf({2, 4, 2, 4}, 9)});
  CHECK_THROWS_WITH(rope(x, Tensor::zeros({1, 4}, DType::i64)), Catch::Contains("or per row [batch, tokens] = [2, 4]"));
}

TEST_CASE("rope: argument errors name the problem", "[ops][rope]") {
  const Tensor x = random({1, 3, 2, 4}, 5);
  CHECK_THROWS_WITH(rope(x, positions_of({0, 1})), Catch::Contains("positions must be [tokens] = [3]"));
  CHECK_THROWS_WITH(rope(x, Tensor::zeros({3})), Catch::Contains("must be i64 or i32"));
  CHECK_THROWS_WITH(rope(random({1, 3, 2, 5}, 6), positions_of({0, 1, 2})), Catch::Contains("is odd"));
  CHECK_THROWS_WITH(rope(random({3, 2, 4}, 7), positions_of({0, 1, 2})), Catch::Contains("[batch, tokens, heads"));
}
