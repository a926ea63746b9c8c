// Fused softmax cross-entropy against its naive reference, against central finite differences
// of the mean loss (f64), a hand-computed example, ignored rows, and 1e4-scale logits.
//
// Tolerances (relative, with the same value as an absolute floor for entries near 0):
//   f32 1e-5 — log-sum-exp in double, exponentials in float;
//   f64 1e-12 — fast and reference differ only in the order of operations.
//   finite differences (f64, h = 1e-5): max|analytic - numeric| / max|numeric| < 1e-7.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

constexpr std::int64_t kIgnore = -100;  // PyTorch's default ignore_index

// Random targets in [0, vocab), with every `ignore_every`-th row set to ignore_index.
std::vector<std::int64_t> random_targets(std::int64_t rows, std::int64_t vocab, std::uint32_t seed,
                                         std::int64_t ignore_every) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, vocab - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) t[r] = r % ignore_every == ignore_every - 1 ? kIgnore : dist(gen);
  return t;
}

// Forward + mean + backward of the fast kernels and the references on the same inputs.
template <typename T>
void check_against_reference(std::int64_t rows, std::int64_t vocab, const std::vector<T>& logits,
                             const std::vector<std::int64_t>& targets, bool per_row_grad) {
  std::vector<T> losses(rows), lse(rows), losses_ref(rows), lse_ref(rows);
  const std::int64_t count = cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore,
                                                   losses.data(), lse.data());
  const std::int64_t count_ref = cross_entropy_forward_reference(rows, vocab, logits.data(), targets.data(), kIgnore,
                                                                 losses_ref.data(), lse_ref.data());
  REQUIRE(count == count_ref);
  require_close(losses, losses_ref);
  require_close(lse, lse_ref);
  CHECK(all_finite(losses));

  const double grad_scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  const auto row_grad = randn<T>(rows, 99);
  const T* row_grad_ptr = per_row_grad ? row_grad.data() : nullptr;
  std::vector<T> dlogits(rows * vocab), dlogits_ref(rows * vocab);
  cross_entropy_backward(rows, vocab, logits.data(), targets.data(), kIgnore, lse.data(), grad_scale, dlogits.data(),
                         row_grad_ptr);
  cross_entropy_backward_reference(rows, vocab, logits.data(), targets.data(), kIgnore, lse.data(), grad_scale,
                                   dlogits_ref.data(), row_grad_ptr);
  require_close(dlogits, dlogits_ref);
  CHECK(all_finite(dlogits));

  // In place (dlogits overwriting the logits) gives the same gradient.
  auto in_place = logits;
  cross_entropy_backward(rows, vocab, in_place.data(), targets.data(), kIgnore, lse.data(), grad_scale,
                         in_place.data(), row_grad_ptr);
  CHECK(in_place == dlogits);
}

}  // namespace

TEMPLATE_TEST_CASE("cross-entropy forward and backward match the reference", "[kernels][cross_entropy]", float,
                   double) {
  using T = TestType;
  struct Size {
    std::int64_t rows, vocab;
  };
  // Vocabularies past 1024 sum their exponentials in several runs; 50257 is GPT-2's (not a multiple of
  // any SIMD width, so the last vector is partial).
  for (const Size s : std::vector<Size>{{1, 1}, {1, 37}, {0, 8}, {6, 1}, {7, 37}, {13, 100}, {3, 5000}, {2, 50257}}) {
    for (const bool per_row_grad : {false, true}) {
      CAPTURE(s.rows, s.vocab, per_row_grad);
      const auto logits = randn<T>(s.rows * s.vocab, 1, 3.0);
      check_against_reference(s.rows, s.vocab, logits, random_targets(s.rows, s.vocab, 2, 3), per_row_grad);
    }
  }
}

TEST_CASE("cross-entropy backward matches finite differences of the mean loss (f64)", "[kernels][cross_entropy]") {
  const std::int64_t rows = 4, vocab = 6;
  auto logits = randn<double>(rows * vocab, 11, 2.0);
  const auto targets = random_targets(rows, vocab, 12, 3);  // row 2 is ignored
  REQUIRE(targets[2] == kIgnore);
  auto mean_loss = [&] {
    std::vector<double> losses(rows), lse(rows);
    const std::int64_t count =
        cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore, losses.data(), lse.data());
    return cross_entropy_mean(rows, losses.data(), count);
  };

  std::vector<double> losses(rows), lse(rows), dlogits(rows * vocab);
  const std::int64_t count =
      cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore, losses.data(), lse.data());
  REQUIRE(count == 3);
  cross_entropy_backward(rows, vocab, logits.data(), targets.data(), kIgnore, lse.data(), 1.0 / count,
                         dlogits.data());
  CHECK(max_relative_error(dlogits, central_differences(logits, mean_loss)) < 1e-7);
}

TEST_CASE("cross-entropy on a hand-computed example", "[kernels][cross_entropy]") {
  // logits [1, 2, 3]: logsumexp = 3 + log(1 + e^-1 + e^-2) = 3.40760596444438,
  // softmax = [0.0900305731703805, 0.2447284710547977, 0.6652409557748220].
  const std::vector<double> logits = {1, 2, 3, 1, 2, 3};
  const std::vector<std::int64_t> targets = {2, 0};
  std::vector<double> losses(2), lse(2), dlogits(6);
  const std::int64_t count = cross_entropy_forward(2, 3, logits.data(), targets.data(), kIgnore, losses.data(),
                                                   lse.data());
  REQUIRE(count == 2);
  CHECK(lse[0] == Approx(3.40760596444438).epsilon(1e-14));
  CHECK(losses[0] == Approx(0.40760596444438).epsilon(1e-13));  // lse - 3
  CHECK(losses[1] == Approx(2.40760596444438).epsilon(1e-13));  // lse - 1
  CHECK(cross_entropy_mean(2, losses.data(), count) == Approx(1.40760596444438).epsilon(1e-13));

  // Mean reduction: dlogits = (softmax - onehot) / 2.
  cross_entropy_backward(2, 3, logits.data(), targets.data(), kIgnore, lse.data(), 0.5, dlogits.data());
  const std::vector<double> expected = {0.0900305731703805 / 2,  0.2447284710547977 / 2, (0.6652409557748220 - 1) / 2,
                                        (0.0900305731703805 - 1) / 2, 0.2447284710547977 / 2, 0.6652409557748220 / 2};
  REQUIRE_THAT(dlogits, Catch::Matchers::Approx(expected).epsilon(1e-13));
}

TEST_CASE("cross-entropy with every row ignored has count 0, mean 0 and zero gradient", "[kernels][cross_entropy]") {
  const std::int64_t rows = 3, vocab = 5;
  const auto logits = randn<float>(rows * vocab, 21);
  const std::vector<std::int64_t> targets(rows, kIgnore);
  std::vector<float> losses(rows, -1.0f), lse(rows), dlogits(rows * vocab, -1.0f);
  const std::int64_t count =
      cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore, losses.data(), lse.data());
  CHECK(count == 0);
  CHECK(losses == std::vector<float>(rows, 0.0f));
  // By definition (not 0/0): an empty batch has mean loss 0.
  CHECK(cross_entropy_mean(rows, losses.data(), count) == 0.0f);
  cross_entropy_backward(rows, vocab, logits.data(), targets.data(), kIgnore, lse.data(), 0.0, dlogits.data());
  CHECK(dlogits == std::vector<float>(rows * vocab, 0.0f));
}

TEMPLATE_TEST_CASE("cross-entropy is stable for 1e4-scale logits", "[kernels][cross_entropy]", float, double) {
  using T = TestType;
  const std::int64_t rows = 5, vocab = 37;
  const auto logits = randn<T>(rows * vocab, 31, 1e4);
  const auto targets = random_targets(rows, vocab, 32, 4);
  check_against_reference(rows, vocab, logits, targets, false);

  // Losses are O(1e4) here: also check them against a double computation from scratch.
  std::vector<T> losses(rows), lse(rows);
  cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore, losses.data(), lse.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] == kIgnore) continue;
    double m = -INFINITY, s = 0.0;
    for (std::int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(logits[r * vocab + j]));
    for (std::int64_t j = 0; j < vocab; ++j) s += std::exp(logits[r * vocab + j] - m);
    const double expected = m + std::log(s) - logits[r * vocab + targets[r]];
    CHECK(losses[r] == Approx(expected).epsilon(kTolerance<T>).margin(kTolerance<T>));
  }
}

TEST_CASE("cross-entropy rejects targets outside the vocabulary", "[kernels][cross_entropy]") {
  const std::int64_t rows = 3, vocab = 4;
  const auto logits = randn<float>(rows * vocab, 41);
  std::vector<float> losses(rows), lse(rows), dlogits(rows * vocab);
  for (const std::int64_t bad : {std::int64_t{4}, std::int64_t{-1}, std::int64_t{1000}}) {
    const std::vector<std::int64_t> targets = {0, bad, kIgnore};
    CAPTURE(bad);
    CHECK_THROWS_WITH(
        cross_entropy_forward(rows, vocab, logits.data(), targets.data(), kIgnore, losses.data(), lse.data()),
        Catch::Contains("target " + std::to_string(bad) + " of row 1") && Catch::Contains("[0, 4)"));
    CHECK_THROWS_AS(cross_entropy_backward(rows, vocab, logits.data(), targets.data(), kIgnore, lse.data(), 1.0,
                                           dlogits.data()),
                    wf::Error);
  }
  CHECK_THROWS_AS(cross_entropy_mean(2, losses.data(), 3), wf::Error);  // more counted rows than rows
}
