// Embedding lookup and its scatter-add backward against the naive references.
//
// Tolerance: none — both are compared for exact equality. The forward is a copy, and the
// backward sums each id's gradient rows in token order in double, exactly as the reference
// does, so any difference at all is a bug (and the result cannot depend on the thread count).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

// Ids drawn from a small range so that many tokens repeat (the scatter-add's hard case).
std::vector<std::int64_t> random_ids(std::int64_t num_tokens, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, vocab - 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(num_tokens));
  for (auto& id : ids) id = dist(gen);
  return ids;
}

}  // namespace

TEMPLATE_TEST_CASE("embedding forward and backward match the reference exactly", "[kernels][embedding]", float,
                   double) {
  using T = TestType;
  struct Size {
    std::int64_t tokens, dim, vocab;
  };
  for (const Size s : std::vector<Size>{{1, 1, 1}, {0, 8, 5}, {1, 37, 3}, {9, 1, 4}, {50, 37, 11}, {64, 16, 1000}}) {
    CAPTURE(s.tokens, s.dim, s.vocab);
    const auto weight = randn<T>(s.vocab * s.dim, 1);
    const auto ids = random_ids(s.tokens, s.vocab, 2);
    std::vector<T> out(s.tokens * s.dim), out_ref(s.tokens * s.dim);
    embedding_forward(s.tokens, s.dim, s.vocab, weight.data(), ids.data(), out.data());
    embedding_forward_reference(s.tokens, s.dim, s.vocab, weight.data(), ids.data(), out_ref.data());
    CHECK(out == out_ref);

    // dweight starts non-zero: the backward must add to it and leave unused rows alone.
    const auto dout = randn<T>(s.tokens * s.dim, 3);
    auto dweight = randn<T>(s.vocab * s.dim, 4);
    auto dweight_ref = dweight;
    embedding_backward(s.tokens, s.dim, s.vocab, ids.data(), dout.data(), dweight.data());
    embedding_backward_reference(s.tokens, s.dim, s.vocab, ids.data(), dout.data(), dweight_ref.data());
    CHECK(dweight == dweight_ref);
  }
}

TEST_CASE("embedding backward is bitwise independent of the thread count", "[kernels][embedding]") {
  ThreadCountGuard guard;
  // Above the 32768-element threshold, with heavily repeated ids.
  const std::int64_t tokens = 700, dim = 67, vocab = 23;
  const auto ids = random_ids(tokens, vocab, 11);
  const auto dout = randn<float>(tokens * dim, 12);
  std::vector<float> expected(vocab * dim, 0.0f);
  embedding_backward_reference(tokens, dim, vocab, ids.data(), dout.data(), expected.data());
  for (const int threads : {1, 2, 3}) {
    CAPTURE(threads);
    wf::set_num_threads(threads);
    std::vector<float> dweight(vocab * dim, 0.0f);
    embedding_backward(tokens, dim, vocab, ids.data(), dout.data(), dweight.data());
    CHECK(dweight == expected);
  }
}

TEST_CASE("embedding rejects ids outside the vocabulary", "[kernels][embedding]") {
  const std::int64_t dim = 4, vocab = 10;
  const auto weight = randn<float>(vocab * dim, 21);
  std::vector<float> out(3 * dim, 0.0f), dweight(vocab * dim, 0.0f);
  for (const std::int64_t bad : {std::int64_t{10}, std::int64_t{-1}}) {
    CAPTURE(bad);
    const std::vector<std::int64_t> ids = {1, 2, bad};
    // Named matchers: a combined matcher only points at its parts, so they must outlive it.
    const auto names_id = Catch::Contains("token id " + std::to_string(bad) + " at index 2");
    const auto names_vocab = Catch::Contains("[0, 10)");
    const auto message = names_id && names_vocab;
    CHECK_THROWS_WITH(embedding_forward(3, dim, vocab, weight.data(), ids.data(), out.data()), message);
    CHECK_THROWS_WITH(embedding_backward(3, dim, vocab, ids.data(), out.data(), dweight.data()), message);
    // Checked before anything is written.
    CHECK(out == std::vector<float>(3 * dim, 0.0f));
    CHECK(dweight == std::vector<float>(vocab * dim, 0.0f));
  }
}
