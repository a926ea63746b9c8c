// cross_entropy: the mean loss against the naive kernel reference (f32 to 1e-6, f64 to 1e-12),
// gradients against central differences (f64 gradcheck, default tolerances) with ignored
// rows and a non-unit upstream gradient, and argument errors.
#include <catch2/catch.hpp>

#include "kernels/cpu/cross_entropy.h"
#include "ops/ops_testing.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/loss.h"

using namespace wf;
using namespace wf::testing;

namespace {

constexpr std::int64_t kIgnore = -100;

// Mean of the reference per-row losses over the rows that are not ignored (0 when none).
double cross_entropy_reference(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  const std::int64_t vocab = logits.size(-1), rows = logits.numel() / vocab;
  const Tensor l = logits.to(DType::f64), t = targets.to(DType::i64);
  std::vector<double> losses(rows), lse(rows);
  const std::int64_t count = kernels::cpu::cross_entropy_forward_reference<double>(
      rows, vocab, l.data<double>(), t.data<std::int64_t>(), ignore_index, losses.data(), lse.data());
  double total = 0;
  for (double x : losses) total += x;
  return count > 0 ? total / double(count) : 0.0;
}

// [2, 3] targets over a vocabulary of 5 with two padded rows.
Tensor targets_with_padding() {
  return Tensor::from_vector<std::int64_t>({4, kIgnore, 0, 2, 2, kIgnore}, {2, 3});
}
// For ignore_index = 2, a class index: the two rows with target 2 are ignored.
constexpr std::int64_t kIgnoreClass = 2;
Tensor targets_with_class_2() { return Tensor::from_vector<std::int64_t>({4, 2, 0, 1, 2, 3}, {2, 3}); }

}  // namespace

TEST_CASE("cross_entropy matches the reference mean loss", "[ops][loss]") {
  const Tensor targets = targets_with_padding();
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor logits = random({2, 3, 5}, 1, dtype);
    const Tensor loss = cross_entropy(logits, targets, kIgnore);
    REQUIRE(loss.dim() == 0);
    REQUIRE(loss.dtype() == dtype);
    const double tol = dtype == DType::f32 ? 1e-6 : 1e-12;
    CHECK(loss.item() == Approx(cross_entropy_reference(logits, targets, kIgnore)).epsilon(tol).margin(tol));
  }
  // A class index used as ignore_index drops exactly the rows with that target.
  const Tensor logits = random({2, 3, 5}, 2);
  const Tensor class_targets = targets_with_class_2();
  CHECK(cross_entropy(logits, class_targets, kIgnoreClass).item() ==
        Approx(cross_entropy_reference(logits, class_targets, kIgnoreClass)).epsilon(1e-12));
  // i32 targets and a single row (1-D logits, 0-dim target) work too.
  CHECK(cross_entropy(logits, targets.to(DType::i32), kIgnore).item() ==
        Approx(cross_entropy_reference(logits, targets, kIgnore)).epsilon(1e-12));
  const Tensor row = random({5}, 3);
  const Tensor target = Tensor::scalar(3, DType::i64);
  CHECK(cross_entropy(row, target).item() == Approx(cross_entropy_reference(row, target, kIgnore)).epsilon(1e-12));
}

TEST_CASE("cross_entropy gradients pass gradcheck with ignored rows", "[ops][loss][gradcheck]") {
  const Tensor logits = random_leaf({2, 3, 5}, 11);
  const Tensor targets = targets_with_padding();
  // gradcheck weights the scalar loss by a random number: a non-unit upstream gradient.
  require_gradcheck([&](const TensorList& in) { return TensorList{cross_entropy(in[0], targets, kIgnore)}; },
                    {logits});
  const Tensor class_targets = targets_with_class_2();
  require_gradcheck(
      [&](const TensorList& in) { return TensorList{cross_entropy(in[0], class_targets, kIgnoreClass)}; }, {logits});
  require_gradcheck([&](const TensorList& in) { return TensorList{scale(cross_entropy(in[0], targets, kIgnore), 3.0)}; },
                    {logits});
}

TEST_CASE("cross_entropy backward scales by the incoming gradient; ignored rows get none", "[ops][loss]") {
  const Tensor targets = targets_with_padding();
  Tensor a = random_leaf({2, 3, 5}, 21), b = a.detach().clone();
  b.set_requires_grad(true);
  cross_entropy(a, targets, kIgnore).backward();
  cross_entropy(b, targets, kIgnore).backward(Tensor::scalar(3.0, DType::f64));
  Tensor expected = Tensor::empty(a.shape(), DType::f64);
  for (std::int64_t i = 0; i < a.numel(); ++i) expected.set(i, 3.0 * a.grad().at(i));
  require_close(b.grad(), expected, 1e-14, 1e-12);
  for (std::int64_t c = 0; c < 5; ++c) {
    CHECK(a.grad().at({0, 1, c}) == 0.0);  // targets[0, 1] and [1, 2] are padding
    CHECK(a.grad().at({1, 2, c}) == 0.0);
  }
}

TEST_CASE("cross_entropy with every target ignored is 0 with zero gradient", "[ops][loss]") {
  Tensor logits = random_leaf({3, 4}, 31);
  const Tensor targets = Tensor::full({3}, double(kIgnore), DType::i64);
  const Tensor loss = cross_entropy(logits, targets, kIgnore);
  CHECK(loss.item() == 0.0);
  loss.backward();
  require_close(logits.grad(), Tensor::zeros({3, 4}, DType::f64), 0, 0);
}

TEST_CASE("cross_entropy argument errors name the shapes and values", "[ops][loss][errors]") {
  const Tensor logits = random({2, 3, 5}, 41, DType::f32);
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::zeros({3, 2}, DType::i64)),
                      Catch::Contains("[3, 2]") && Catch::Contains("[2, 3, 5]") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::zeros({2, 3, 5}, DType::i64)),
                      Catch::Contains("[2, 3, 5]") && Catch::Contains("last"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::zeros({2, 3}, DType::f32)), Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 7, 4}, {2, 3})),
                      Catch::Contains("7") && Catch::Contains("[0, 5)"));
  REQUIRE_THROWS_WITH(cross_entropy(Tensor::zeros({2, 5}, DType::i64), Tensor::zeros({2}, DType::i64)),
                      Catch::Contains("logits") && Catch::Contains("i64"));
}
