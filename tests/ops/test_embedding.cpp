// embedding: forward rows against the naive kernel reference (exact: a lookup copies), the
// scatter-add gradient against central differences with repeated ids (f64 gradcheck), i32 ids,
// and errors for ids outside the table.
#include <catch2/catch.hpp>

#include "kernels/cpu/embedding.h"
#include "ops/ops_testing.h"
#include "wallfacer/ops/embedding.h"

using namespace wf;
using namespace wf::testing;

namespace {

// ids [2, 3] into a [5, 4] table: id 3 three times, id 1 twice, ids 0 and 2..4 partly unused.
Tensor repeated_ids() { return Tensor::from_vector<std::int64_t>({3, 1, 3, 0, 1, 3}, {2, 3}); }

}  // namespace

TEST_CASE("embedding gathers rows like the reference kernel", "[ops][embedding]") {
  const Tensor ids = repeated_ids();
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor weight = random({5, 4}, 1, dtype);
    const Tensor out = embedding(ids, weight);
    REQUIRE(out.shape() == Shape{2, 3, 4});
    REQUIRE(out.dtype() == dtype);
    Tensor expected = Tensor::empty({2, 3, 4}, dtype);
    dispatch_float(dtype, "test", [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::embedding_forward_reference<T>(6, 4, 5, weight.data<T>(), ids.data<std::int64_t>(),
                                                   expected.data<T>());
    });
    require_close(out, expected, 0, 0);
    require_close(embedding(ids.to(DType::i32), weight), expected, 0, 0);
  }
  // A 0-dim id gives one row; bf16 tables round-trip exactly (a lookup is a copy).
  const Tensor weight = random({5, 4}, 2, DType::f32).to(DType::bf16);
  const Tensor row = embedding(Tensor::scalar(2, DType::i64), weight);
  REQUIRE(row.shape() == Shape{4});
  REQUIRE(row.dtype() == DType::bf16);
  for (std::int64_t c = 0; c < 4; ++c) CHECK(row.at(c) == weight.at({2, c}));
}

TEST_CASE("embedding gradient sums repeated ids (gradcheck)", "[ops][embedding][gradcheck]") {
  const Tensor ids = repeated_ids();
  const Tensor weight = random_leaf({5, 4}, 11);
  require_gradcheck([&](const TensorList& in) { return TensorList{embedding(ids, in[0])}; }, {weight});

  // Rows of unused ids get exactly zero; a used row gets the sum of its tokens' gradients.
  Tensor w = random_leaf({5, 4}, 12);
  embedding(ids.to(DType::i32), w).backward(Tensor::ones({2, 3, 4}, DType::f64));
  for (std::int64_t c = 0; c < 4; ++c) {
    CHECK(w.grad().at({3, c}) == 3.0);
    CHECK(w.grad().at({1, c}) == 2.0);
    CHECK(w.grad().at({0, c}) == 1.0);
    CHECK(w.grad().at({2, c}) == 0.0);
    CHECK(w.grad().at({4, c}) == 0.0);
  }
}

TEST_CASE("embedding errors name the bad id and the vocabulary size", "[ops][embedding][errors]") {
  const Tensor weight = random({5, 4}, 21, DType::f32);
  REQUIRE_THROWS_WITH(embedding(Tensor::from_vector<std::int64_t>({1, 7}, {2}), weight),
                      Catch::Contains("id 7") && Catch::Contains("[0, 5)"));
  REQUIRE_THROWS_WITH(embedding(Tensor::from_vector<std::int32_t>({-1}, {1}), weight),
                      Catch::Contains("id -1") && Catch::Contains("[0, 5)"));
  REQUIRE_THROWS_WITH(embedding(Tensor::zeros({2}, DType::f32), weight), Catch::Contains("ids") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(embedding(Tensor::zeros({2}, DType::i64), random({20}, 22, DType::f32)),
                      Catch::Contains("[vocab, dim]") && Catch::Contains("[20]"));
}
