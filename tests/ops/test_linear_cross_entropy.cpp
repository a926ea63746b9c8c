// linear_cross_entropy_sum against the unfused head it replaces, cross_entropy_sum(cast(linear(h, W),
// W's dtype), targets): the loss bit for bit in f32 and f64 on the CPU, both gradients too in one
// chunk and to the dtype's rounding in smaller ones, bf16 activations against f32 masters within bf16's rounding, a non-unit
// upstream gradient to f32 rounding, gradcheck in f64, grad mode off, the memory it holds, and
// argument errors. The test device runs it in tests/support/op_cases.cpp.
#include <catch2/catch.hpp>

#include <cstring>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"
#include "wallfacer/ops/loss.h"
#include "wallfacer/ops/shape_ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

constexpr std::int64_t kIgnore = -100;

// [rows] targets below `vocab`, every third one ignored.
Tensor targets_with_ignored(std::int64_t rows, std::int64_t vocab, std::uint64_t seed) {
  const Tensor u = Tensor::rand_at({rows}, seed, 0, DType::f64);
  Tensor t = Tensor::empty({rows}, DType::i64);
  for (std::int64_t i = 0; i < rows; ++i) t.set(i, i % 3 == 1 ? double(kIgnore) : std::floor(u.at(i) * double(vocab)));
  return t;
}

struct HeadResult {
  Tensor loss, dh, dw;
};

// The loss and the gradients of h and W for an upstream gradient `upstream` of the loss.
HeadResult run_head(bool fused, const Tensor& h0, const Tensor& w0, const Tensor& targets, std::int64_t chunk_rows,
                    double upstream = 1.0) {
  Tensor h = h0.detach().clone(), w = w0.detach().clone();
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor loss = fused ? linear_cross_entropy_sum(h, w, targets, kIgnore, chunk_rows)
                            : cross_entropy_sum(cast(linear(h, w), w.dtype()), targets, kIgnore);
  if (upstream == 1.0) {
    loss.backward();
  } else {
    loss.backward(Tensor::full({}, upstream, loss.dtype()));
  }
  return {loss.detach(), h.grad(), w.grad()};
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

// Largest |a − b| over the largest |b|: the error relative to the gradient's scale.
double relative_to_max(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(a.at(i) - b.at(i)));
    scale = std::max(scale, std::abs(b.at(i)));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("linear_cross_entropy_sum matches the unfused head bit for bit in f32 and f64", "[ops][loss][linear_ce]") {
  // 7 rows (not a multiple of 3), an odd vocabulary of 11, ignored targets; chunks of 1, 3, all
  // rows and more than all rows.
  const std::int64_t N = 7, d = 5, V = 11;
  const Tensor targets = targets_with_ignored(N, V, 3);
  for (const DType dtype : {DType::f32, DType::f64}) {
    const Tensor h = random({N, d}, 1, dtype), w = random({V, d}, 2, dtype);
    const HeadResult unfused = run_head(false, h, w, targets, 0);
    for (const std::int64_t chunk : {1, 3, 7, 100}) {
      CAPTURE(dtype_name(dtype), chunk);
      const HeadResult fused = run_head(true, h, w, targets, chunk);
      CHECK(same_bytes(fused.loss, unfused.loss));
      if (chunk >= N) {
        CHECK(same_bytes(fused.dh, unfused.dh));
        CHECK(same_bytes(fused.dw, unfused.dw));
      } else {
        // Smaller chunks: dW sums its K = rows product in pieces, and a chunk's GEMM need not
        // give the whole product's rows bit for bit (OpenBLAS's one-row product is a GEMV).
        const double tol = dtype == DType::f32 ? 1e-6 : 1e-14;
        CHECK(relative_to_max(fused.dh, unfused.dh) < tol);
        CHECK(relative_to_max(fused.dw, unfused.dw) < tol);
      }
    }
  }
}

TEST_CASE("linear_cross_entropy_sum scales its gradients by the upstream gradient", "[ops][loss][linear_ce]") {
  // The forward's gradients are for an upstream 1, scaled after the products: one more rounding
  // than the unfused path, which scales each dlogit first.
  const std::int64_t N = 9, d = 6, V = 13;
  const Tensor targets = targets_with_ignored(N, V, 4);
  const Tensor h = random({N, d}, 5, DType::f32), w = random({V, d}, 6, DType::f32);
  const HeadResult unfused = run_head(false, h, w, targets, 0, 0.37);
  const HeadResult fused = run_head(true, h, w, targets, 4, 0.37);
  CHECK(same_bytes(fused.loss, unfused.loss));
  CHECK(relative_to_max(fused.dh, unfused.dh) < 1e-6);
  CHECK(relative_to_max(fused.dw, unfused.dw) < 1e-6);
}

TEST_CASE("linear_cross_entropy_sum with bf16 activations against f32 masters", "[ops][loss][linear_ce]") {
  // The logits are linear's bf16-rounded rows cast to f32, so the loss is the unfused one bit for
  // bit, and so is dh (the same bf16 dlogits times the same bf16 weight, rounded once). dW comes
  // back f32 from f32 accumulators in both; chunks sum its K = rows product in pieces.
  const std::int64_t N = 10, d = 8, V = 17;
  const Tensor targets = targets_with_ignored(N, V, 7);
  const Tensor h = random({N, d}, 8, DType::f32).to(DType::bf16), w = random({V, d}, 9, DType::f32);
  const HeadResult unfused = run_head(false, h, w, targets, 0);
  REQUIRE(unfused.loss.dtype() == DType::f32);
  for (const std::int64_t chunk : {1, 4, 10}) {
    CAPTURE(chunk);
    const HeadResult fused = run_head(true, h, w, targets, chunk);
    CHECK(same_bytes(fused.loss, unfused.loss));
    CHECK(same_bytes(fused.dh, unfused.dh));
    REQUIRE(fused.dw.dtype() == DType::f32);
    CHECK(relative_to_max(fused.dw, unfused.dw) < 1e-6);
  }
}

TEST_CASE("linear_cross_entropy_sum gradients pass gradcheck", "[ops][loss][linear_ce][gradcheck]") {
  // Leading dims [2, 3] on h and the targets, chunks of 2 (the last one short), ignored rows.
  const Tensor h = random_leaf({2, 3, 4}, 11), w = random_leaf({5, 4}, 12);
  const Tensor targets = reshape(targets_with_ignored(6, 5, 13), {2, 3});
  require_gradcheck(
      [&](const TensorList& in) { return TensorList{linear_cross_entropy_sum(in[0], in[1], targets, kIgnore, 2)}; },
      {h, w});
}

TEST_CASE("linear_cross_entropy_sum under grad mode off computes the loss alone", "[ops][loss][linear_ce]") {
  const Tensor targets = targets_with_ignored(6, 7, 14);
  Tensor h = random_leaf({6, 3}, 15), w = random_leaf({7, 3}, 16);
  const Tensor with_grad = linear_cross_entropy_sum(h, w, targets, kIgnore, 4);
  autograd::NoGradGuard no_grad;
  const Tensor without = linear_cross_entropy_sum(h, w, targets, kIgnore, 4);
  CHECK_FALSE(without.requires_grad());
  CHECK(without.item() == with_grad.item());
}

TEST_CASE("linear_cross_entropy_sum holds one chunk of logits, never all of them", "[ops][loss][linear_ce]") {
  // 512 rows over a vocabulary of 1001 in chunks of 32: the unfused head's [512, 1001] f32 logits
  // alone are 2 MB; the fused op's peak above its inputs is a chunk's logits and dlogits (2 × 128
  // KB) and the gradients of h and W (32 KB, 64 KB) with their scaled copies.
  const std::int64_t N = 512, d = 16, V = 1001;
  const Tensor targets = targets_with_ignored(N, V, 17);
  const Tensor h = random({N, d}, 18, DType::f32), w = random({V, d}, 19, DType::f32);
  reset_peak_memory();
  const std::int64_t before = memory_stats().live_bytes;
  run_head(true, h, w, targets, 32);
  const std::int64_t fused_extra = memory_stats().peak_bytes - before;
  CHECK(fused_extra < N * V * 4 / 2);
  reset_peak_memory();
  run_head(false, h, w, targets, 0);
  CHECK(memory_stats().peak_bytes - before >= N * V * 4);  // the unfused logits, at least
}

TEST_CASE("linear_cross_entropy_sum rejects bad arguments with the fix", "[ops][loss][linear_ce]") {
  const Tensor h = random({4, 3}, 20, DType::f32), w = random({5, 3}, 21, DType::f32);
  const Tensor targets = Tensor::zeros({4}, DType::i64);
  CHECK_THROWS_WITH(linear_cross_entropy_sum(h, w, targets, kIgnore, -1), Catch::Contains("positive number of rows"));
  CHECK_THROWS_WITH(linear_cross_entropy_sum(h, random({5, 4}, 22, DType::f32), targets),
                    Catch::Contains("expected h [..., d] and weight [vocab, d]"));
  CHECK_THROWS_WITH(linear_cross_entropy_sum(h, w, Tensor::zeros({3}, DType::i64)), Catch::Contains("i.e. [4]"));
  CHECK_THROWS_WITH(linear_cross_entropy_sum(h, w.to(DType::f64), targets), Catch::Contains("must share a dtype"));
  CHECK_THROWS_WITH(linear_cross_entropy_sum(h, w, Tensor::zeros({4}, DType::f32)), Catch::Contains("must be i64"));
  CHECK(linear_cross_entropy_chunk_rows(50257) == 1335);  // 256 MiB of f32 logits
  CHECK(linear_cross_entropy_chunk_rows(1 << 30) == 1);
}
