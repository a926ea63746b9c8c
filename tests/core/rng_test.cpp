// Counter-based RNG: the Philox known answers, determinism, layout independence (a slice drawn
// alone equals the same slice of a full draw), the Generator stream, and the distributions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "wallfacer/core/rng.h"
#include "wallfacer/core/tensor.h"

using wf::DType;
using wf::Tensor;

namespace {

// Bitwise equality of all elements (both tensors f64, so at() is exact).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (a.at(i) != b.at(i)) return false;
  }
  return true;
}

struct Moments {
  double mean = 0, variance = 0, min = 0, max = 0;
};
Moments moments(const Tensor& t) {
  const double* p = t.data<double>();
  Moments m{0, 0, p[0], p[0]};
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    m.mean += p[i];
    m.min = std::min(m.min, p[i]);
    m.max = std::max(m.max, p[i]);
  }
  m.mean /= static_cast<double>(t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) m.variance += (p[i] - m.mean) * (p[i] - m.mean);
  m.variance /= static_cast<double>(t.numel() - 1);
  return m;
}

}  // namespace

TEST_CASE("philox4x32 matches the Random123 Philox4x32-10 known answers", "[core]") {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter words c0..c3, key
  // words k0..k1, expected output. Our API packs key = k0 | k1 << 32, counter_lo = c0 | c1 << 32,
  // counter_hi = c2 | c3 << 32.
  struct Kat {
    std::array<std::uint32_t, 4> counter;
    std::array<std::uint32_t, 2> key;
    std::array<std::uint32_t, 4> expected;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  auto pack = [](std::uint32_t low, std::uint32_t high) { return low | (static_cast<std::uint64_t>(high) << 32); };
  for (const Kat& kat : kats) {
    const auto out = wf::philox4x32(pack(kat.key[0], kat.key[1]), pack(kat.counter[0], kat.counter[1]),
                                    pack(kat.counter[2], kat.counter[3]));
    CAPTURE(kat.counter[0], kat.key[0]);
    CHECK(out == kat.expected);
  }
}

TEST_CASE("rand_at and randn_at depend only on (seed, index)", "[core]") {
  const Tensor a = Tensor::randn_at({64}, 42, 0, DType::f64);
  CHECK(same_values(a, Tensor::randn_at({64}, 42, 0, DType::f64)));
  for (std::int64_t k = 0; k < 64; ++k) CHECK(a.at(k) == wf::normal_at(42, static_cast<std::uint64_t>(k)));

  const Tensor shifted = Tensor::randn_at({63}, 42, 1, DType::f64);
  CHECK(same_values(shifted, a.view({64}).slice0(1, 64)));

  const Tensor other_seed = Tensor::randn_at({64}, 43, 0, DType::f64);
  int equal = 0;
  for (std::int64_t k = 0; k < 64; ++k) equal += a.at(k) == other_seed.at(k);
  CHECK(equal == 0);

  const Tensor u = Tensor::rand_at({16}, 42, 5, DType::f64);
  for (std::int64_t k = 0; k < 16; ++k) CHECK(u.at(k) == wf::uniform_at(42, 5 + static_cast<std::uint64_t>(k)));
  // f32 draws are the f64 draws rounded.
  const Tensor a32 = Tensor::randn_at({64}, 42, 0, DType::f32);
  for (std::int64_t k = 0; k < 64; ++k) CHECK(a32.at(k) == static_cast<float>(a.at(k)));
}

TEST_CASE("a slice drawn on its own equals the same slice of the full draw", "[core]") {
  const std::uint64_t seed = 1234, first = 100;
  const Tensor full = Tensor::randn_at({10, 7}, seed, first, DType::f64);
  const std::pair<std::int64_t, std::int64_t> row_ranges[] = {{0, 10}, {2, 5}, {9, 10}, {4, 4}};
  for (const auto& [begin, end] : row_ranges) {
    CAPTURE(begin, end);
    const Tensor alone =
        Tensor::randn_at({end - begin, 7}, seed, first + static_cast<std::uint64_t>(begin * 7), DType::f64);
    CHECK(same_values(alone, full.slice0(begin, end)));
  }
  // Large enough to be filled by several OpenMP threads; a small serial draw of its middle must agree.
  const Tensor big = Tensor::rand_at({40000}, 7, 0, DType::f64);
  CHECK(same_values(Tensor::rand_at({1000}, 7, 20000, DType::f64), big.slice0(20000, 21000)));
}

TEST_CASE("Generator hands out consecutive index ranges and can replay them", "[core]") {
  wf::Generator g(5);
  CHECK(g.seed() == 5);
  CHECK(g.offset() == 0);
  CHECK(g.advance(10) == 0);
  CHECK(g.advance(3) == 10);
  CHECK(g.offset() == 13);
  g.manual_seed(9);
  CHECK(g.seed() == 9);
  CHECK(g.offset() == 0);

  wf::Generator gen(5);
  const Tensor first = Tensor::randn({4, 3}, DType::f64, &gen);
  const Tensor second = Tensor::randn({4, 3}, DType::f64, &gen);
  CHECK(gen.offset() == 24);
  CHECK(same_values(first, Tensor::randn_at({4, 3}, 5, 0, DType::f64)));
  CHECK(same_values(second, Tensor::randn_at({4, 3}, 5, 12, DType::f64)));

  const wf::Generator::State saved = gen.state();
  const Tensor x = Tensor::rand({8}, DType::f64, &gen);
  gen.set_state(saved);
  const Tensor y = Tensor::rand({8}, DType::f64, &gen);
  CHECK(same_values(x, y));
  CHECK(gen.offset() == saved.offset + 8);

  wf::manual_seed(123);
  const Tensor d = Tensor::randn({5}, DType::f64);
  CHECK(same_values(d, Tensor::randn_at({5}, 123, 0, DType::f64)));
  CHECK(wf::default_generator().offset() == 5);
}

TEST_CASE("normal draws have mean 0 and variance 1; uniform draws lie in [0, 1)", "[core]") {
  const std::int64_t n = 100000;
  // Standard errors at n = 1e5: mean 0.0032, variance 0.0045; the bounds are ~6 of them.
  const Moments z = moments(Tensor::randn_at({n}, 2024, 0, DType::f64));
  CHECK(std::abs(z.mean) < 0.02);
  CHECK(std::abs(z.variance - 1.0) < 0.03);
  CHECK(z.min < -3.5);  // tails are there
  CHECK(z.max > 3.5);

  const Moments u = moments(Tensor::rand_at({n}, 2024, 0, DType::f64));
  CHECK(u.min >= 0.0);
  CHECK(u.max < 1.0);
  CHECK(std::abs(u.mean - 0.5) < 0.005);
  CHECK(std::abs(u.variance - 1.0 / 12.0) < 0.003);
}

// Regression: uniforms within half an ulp of 1 used to round up to exactly 1 in the storage
// dtype (f32: seed 0, index 38471471; bf16: one draw in ~500). Draws are now quantised to the
// dtype's precision.
TEST_CASE("uniform draws stay below 1 in every floating dtype", "[core]") {
  CHECK(Tensor::rand_at({1}, 0, 38471471, DType::f32).at(0) < 1.0);
  const Tensor u = Tensor::rand_at({4096}, 0, 0, DType::bf16).to(DType::f64);
  double largest = 0;
  for (std::int64_t i = 0; i < u.numel(); ++i) largest = std::max(largest, u.at(i));
  CHECK(largest < 1.0);
}

TEST_CASE("GeneratorTracker: a fork draws from the named stream and leaves the default generator alone",
          "[core]") {
  const wf::GeneratorTracker::States saved_tracker = wf::generator_tracker().states();
  const wf::Generator::State saved_default = wf::default_generator().state();
  wf::GeneratorTracker& tracker = wf::generator_tracker();
  tracker.seed("t.stream", 123);
  wf::default_generator().set_state({77, 5});

  Tensor forked;
  {
    const wf::ForkedGenerator fork("t.stream");
    forked = Tensor::rand({4, 3}, DType::f64);
  }
  // The draw is the stream's elements [0, 12); the stream moved on, the default did not.
  CHECK(same_values(forked, Tensor::rand_at({4, 3}, 123, 0, DType::f64)));
  CHECK(tracker.state("t.stream").offset == 12);
  CHECK(wf::default_generator().state().seed == 77);
  CHECK(wf::default_generator().state().offset == 5);

  // A second fork continues the stream; restoring saved states replays it.
  const wf::GeneratorTracker::States before = tracker.states();
  Tensor next, again;
  {
    const wf::ForkedGenerator fork("t.stream");
    next = Tensor::rand({4, 3}, DType::f64);
  }
  CHECK(same_values(next, Tensor::rand_at({4, 3}, 123, 12, DType::f64)));
  tracker.set_states(before);
  {
    const wf::ForkedGenerator fork("t.stream");
    again = Tensor::rand({4, 3}, DType::f64);
  }
  CHECK(same_values(again, next));

  // A snapshot replays every stream, and leaving the replay puts them all back.
  const wf::RngSnapshot snapshot = wf::rng_snapshot();
  const Tensor default_draw = Tensor::rand({5}, DType::f64);
  {
    const wf::ForkedGenerator fork("t.stream");
    (void)Tensor::rand({5}, DType::f64);
  }
  const wf::RngSnapshot after = wf::rng_snapshot();
  {
    const wf::ReplayedGenerator replay(snapshot);
    CHECK(same_values(Tensor::rand({5}, DType::f64), default_draw));
    CHECK(wf::generator_tracker().state("t.stream").offset == snapshot.tracked.at("t.stream").offset);
  }
  CHECK(wf::default_generator().state().offset == after.default_state.offset);
  CHECK(wf::generator_tracker().state("t.stream").offset == after.tracked.at("t.stream").offset);

  CHECK_THROWS_WITH(wf::ForkedGenerator("t.no-such-stream"), Catch::Contains("no stream 't.no-such-stream'"));
  tracker.set_states(saved_tracker);
  wf::default_generator().set_state(saved_default);
}
