// The pieces of vocabulary-parallel cross-entropy (kernels/cpu/vocab_parallel.h), run for every
// rank of a simulated tensor-parallel group with the all-reduces done here, against the
// single-device reference over the whole vocabulary (cross_entropy_*_reference).
//
// Tolerances: kTolerance<T> (f32 1e-5, f64 1e-12) on losses and gradients: the pieces compute in
// double like the reference and differ from it only in the order of the sums.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/vocab_parallel.h"
#include "kernels/kernel_testing.h"

namespace cpu = wf::kernels::cpu;
using namespace wf::testing;

namespace {

constexpr std::int64_t kIgnore = -100;

struct Split {
  std::int64_t rows, vocab, parts;
};

// The mean (or sum) loss and the whole [rows, vocab] gradient, from the per-rank pieces.
template <class T>
void vocab_parallel(const Split& s, const std::vector<T>& logits, const std::vector<std::int64_t>& targets, bool mean,
                    double grad, double& loss, std::vector<T>& dlogits) {
  const std::int64_t padded = (s.vocab + s.parts - 1) / s.parts * s.parts, k = padded / s.parts;
  std::vector<std::vector<T>> shard(s.parts, std::vector<T>(s.rows * k, T(0)));
  for (std::int64_t p = 0; p < s.parts; ++p) {
    for (std::int64_t r = 0; r < s.rows; ++r) {
      for (std::int64_t j = 0; j < k && p * k + j < s.vocab; ++j) shard[p][r * k + j] = logits[r * s.vocab + p * k + j];
    }
  }
  const auto own = [&](std::int64_t p) { return std::clamp(s.vocab - p * k, std::int64_t{0}, k); };
  const std::int64_t count = cpu::checked_target_count("test", s.rows, s.vocab, targets.data(), kIgnore);
  std::vector<double> max(s.rows, -std::numeric_limits<double>::infinity()), sums(2 * s.rows, 0.0);
  for (std::int64_t p = 0; p < s.parts; ++p) {  // the all-reduce (max)
    std::vector<double> m(s.rows);
    cpu::vocab_parallel_row_max<T>(s.rows, k, own(p), shard[p].data(), m.data());
    for (std::int64_t r = 0; r < s.rows; ++r) max[r] = std::max(max[r], m[r]);
  }
  for (std::int64_t p = 0; p < s.parts; ++p) {  // the all-reduce (sum)
    std::vector<double> part(2 * s.rows);
    cpu::vocab_parallel_partials<T>(s.rows, k, own(p), p * k, shard[p].data(), max.data(), targets.data(), kIgnore,
                                    part.data());
    for (std::int64_t i = 0; i < 2 * s.rows; ++i) sums[i] += part[i];
  }
  std::vector<double> lse(s.rows);
  cpu::vocab_parallel_loss(s.rows, max.data(), sums.data(), targets.data(), kIgnore, mean ? &count : nullptr,
                           lse.data(), &loss);
  const double scale = mean ? (count > 0 ? grad / double(count) : 0.0) : grad;
  dlogits.assign(s.rows * s.vocab, T(0));
  for (std::int64_t p = 0; p < s.parts; ++p) {
    std::vector<T> d(s.rows * k, T(-7));  // overwritten, padding included
    cpu::vocab_parallel_backward<T>(s.rows, k, own(p), p * k, shard[p].data(), targets.data(), kIgnore, lse.data(),
                                    scale, d.data());
    for (std::int64_t r = 0; r < s.rows; ++r) {
      for (std::int64_t j = 0; j < k; ++j) {
        if (p * k + j < s.vocab) {
          dlogits[r * s.vocab + p * k + j] = d[r * k + j];
        } else {
          REQUIRE(d[r * k + j] == T(0));  // padding columns get no gradient
        }
      }
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("vocab-parallel cross-entropy pieces match the whole-vocabulary reference",
                   "[kernels][vocab_parallel]", float, double) {
  using T = TestType;
  std::uint64_t seed = 5;
  for (const Split s : {Split{6, 11, 2}, Split{5, 10, 4}, Split{3, 7, 1}, Split{4, 3, 4}, Split{70, 1000, 3}}) {
    for (const bool mean : {true, false}) {
      const auto logits = randn<T, std::mt19937_64>(s.rows * s.vocab, seed++, 3.0);
      std::vector<std::int64_t> targets(s.rows);
      for (std::int64_t r = 0; r < s.rows; ++r) targets[r] = r % 3 == 1 ? kIgnore : (r * 7 + 3) % s.vocab;
      double loss = 0;
      std::vector<T> dlogits;
      vocab_parallel<T>(s, logits, targets, mean, 0.75, loss, dlogits);

      std::vector<T> losses(s.rows), lse(s.rows), want(s.rows * s.vocab);
      const std::int64_t count = cpu::cross_entropy_forward_reference<T>(s.rows, s.vocab, logits.data(),
                                                                         targets.data(), kIgnore, losses.data(),
                                                                         lse.data());
      double total = 0;
      for (T l : losses) total += double(l);
      const double want_loss = mean ? (count > 0 ? total / double(count) : 0.0) : total;
      const double scale = mean ? (count > 0 ? 0.75 / double(count) : 0.0) : 0.75;
      cpu::cross_entropy_backward_reference<T>(s.rows, s.vocab, logits.data(), targets.data(), kIgnore, lse.data(),
                                               scale, want.data());
      INFO("rows=" << s.rows << " vocab=" << s.vocab << " parts=" << s.parts << " mean=" << mean);
      CHECK(loss == Approx(want_loss).epsilon(kTolerance<T>).margin(kTolerance<T>));
      require_close(dlogits, want);
    }
  }
}

TEST_CASE("vocab-parallel cross-entropy with every row ignored has loss 0 and zero gradient",
          "[kernels][vocab_parallel]") {
  const Split s{3, 6, 2};
  const std::vector<double> logits = randn<double>(18, 3);
  const std::vector<std::int64_t> targets(3, kIgnore);
  double loss = -1;
  std::vector<double> d;
  vocab_parallel<double>(s, logits, targets, /*mean=*/true, 1.0, loss, d);
  CHECK(loss == 0.0);
  CHECK(std::all_of(d.begin(), d.end(), [](double v) { return v == 0.0; }));
}

TEST_CASE("vocab_parallel_local_ids maps the ids a rank holds to its rows and masks the others",
          "[kernels][vocab_parallel]") {
  const std::vector<std::int64_t> ids{0, 4, 5, 9, 3, 7};
  std::vector<std::int64_t> local(ids.size(), -5);
  std::vector<double> mask(ids.size(), -5);
  cpu::vocab_parallel_local_ids("test", 6, 10, /*start=*/4, /*rows=*/3, ids.data(), local.data(), mask.data());
  CHECK(local == std::vector<std::int64_t>{0, 0, 1, 0, 0, 0});  // rows 4..6 held: ids 4 (row 0) and 5 (row 1)
  CHECK(mask == std::vector<double>{0, 1, 1, 0, 0, 0});
  const std::vector<std::int64_t> bad{1, 10};
  CHECK_THROWS_WITH(cpu::vocab_parallel_local_ids("test", 2, 10, 0, 5, bad.data(), local.data(), mask.data()),
                    Catch::Contains("test: id 10 at flat index 1 is outside [0, 10)"));
}
