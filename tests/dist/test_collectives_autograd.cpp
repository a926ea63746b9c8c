// Autograd-aware collectives (wallfacer/parallel/collectives.h), in f64: each forward against the
// result computed locally, each backward against the analytic gradient of the job's loss
// L = Σ_r L_r, L_r = Σ w_r ∘ y_r (w_r deterministic per rank), i.e. what ONE process computing
// the whole thing would get for this rank's input; then the traffic of that forward + backward.
#include <fmt/format.h>

#include <functional>
#include <vector>

#include "dist_testing.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/parallel/collectives.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/ops/shape_ops.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using namespace wf::test;

namespace {

constexpr DType kF64 = DType::f64;
constexpr std::uint64_t kInputSeed = 71, kWeightSeed = 72;
constexpr std::int64_t kF64Bytes = 8;

// Rank `rank`'s input, as a leaf that requires grad.
Tensor input_leaf(int rank, const Shape& shape) {
  Tensor x = input_of(rank, shape, kF64, kInputSeed);
  x.set_requires_grad();
  return x;
}

// The weights of rank `rank`'s loss term.
Tensor weights_of(int rank, const Shape& shape) { return input_of(rank, shape, kF64, kWeightSeed); }

// This rank's share of the loss, run backward: L_r = Σ w_r ∘ y_r.
void backward_weighted_sum(const Tensor& y, const Tensor& w) { wf::sum(wf::mul(y, w)).backward(); }

// Rows [r·n, (r+1)·n) of t: rank r's block of a tensor split along dim 0 into `ranks` blocks.
Tensor block(const Tensor& t, int r, int ranks) {
  const std::int64_t n = t.size(0) / ranks;
  return t.slice0(r * n, (r + 1) * n);
}

// `calls` calls of one collective that each moved `volume` bytes each way (traffic.h).
wf::comm::Traffic calls_of(int calls, std::int64_t volume) {
  wf::comm::Traffic total;
  for (int i = 0; i < calls; ++i) total += one_call(volume, volume);
  return total;
}

}  // namespace

TEST_CASE("functional all_gather: concatenates; backward reduce-scatters the gradient", "[dist][functional]") {
  auto group = world_group("t.fn.all_gather");
  const int P = group->size(), me = group->rank();
  const Shape piece{2, 3}, whole{2 * P, 3};

  Tensor x = input_leaf(me, piece);
  Tensor y = wf::parallel::all_gather(*group, x);
  CHECK(mismatch(y, concat_inputs(P, piece, kF64, kInputSeed)) == "");

  backward_weighted_sum(y, weights_of(me, whole));
  // x_me sits in every rank's y at block me: its gradient is the sum over ranks of that block.
  Tensor expected = Tensor::zeros(piece, kF64);
  for (int r = 0; r < P; ++r) expected = wf::add(expected, block(weights_of(r, whole), me, P));
  CHECK(mismatch(x.grad(), expected, reduction_tolerance(kF64)) == "");

  const std::int64_t volume = (P - 1) * whole[0] * whole[1] * kF64Bytes / P;  // of the gathered size
  expect_traffic(*group, {{Primitive::all_gather, one_call(volume, volume)},
                          {Primitive::reduce_scatter, one_call(volume, volume)}});
}

TEST_CASE("functional reduce_scatter: sums this rank's block; backward all-gathers", "[dist][functional]") {
  auto group = world_group("t.fn.reduce_scatter");
  const int P = group->size(), me = group->rank();
  const Shape whole{2 * P, 3}, piece{2, 3};

  Tensor x = input_leaf(me, whole);
  Tensor y = wf::parallel::reduce_scatter(*group, x);
  Tensor expected = Tensor::zeros(piece, kF64);
  for (int r = 0; r < P; ++r) expected = wf::add(expected, block(input_of(r, whole, kF64, kInputSeed), me, P));
  CHECK(mismatch(y, expected, reduction_tolerance(kF64)) == "");

  backward_weighted_sum(y, weights_of(me, piece));
  // Block r of every rank's x feeds rank r's output, weighted by w_r.
  CHECK(mismatch(x.grad(), concat_inputs(P, piece, kF64, kWeightSeed)) == "");

  const std::int64_t volume = (P - 1) * whole[0] * whole[1] * kF64Bytes / P;
  expect_traffic(*group, {{Primitive::reduce_scatter, one_call(volume, volume)},
                          {Primitive::all_gather, one_call(volume, volume)}});
}

TEST_CASE("functional all_reduce: sums into a replicated output; backward is the identity", "[dist][functional]") {
  auto group = world_group("t.fn.all_reduce");
  const int P = group->size(), me = group->rank();
  const Shape shape{P, 4};

  Tensor x = input_leaf(me, shape);
  Tensor y = wf::parallel::all_reduce(*group, x);
  Tensor expected = Tensor::zeros(shape, kF64);
  for (int r = 0; r < P; ++r) expected = wf::add(expected, input_of(r, shape, kF64, kInputSeed));
  CHECK(mismatch(y, expected, reduction_tolerance(kF64)) == "");
  CHECK(mismatch(x, input_of(me, shape, kF64, kInputSeed)) == "");  // the input is left alone

  // y is replicated, so what follows it is the same on every rank and the job's loss counts it
  // once: the same w everywhere, L = Σ w ∘ Σ_r x_r, and dL/dx_me = w.
  const Tensor w = weights_of(0, shape);
  backward_weighted_sum(y, w);
  CHECK(mismatch(x.grad(), w) == "");

  const std::int64_t volume = 2 * (P - 1) * shape[0] * shape[1] * kF64Bytes / P;
  expect_traffic(*group, Primitive::all_reduce, volume, volume);
}

TEST_CASE("functional copy_to_group: identity on a replicated input; backward sums over ranks",
          "[dist][functional]") {
  auto group = world_group("t.fn.copy_to_group");
  const int P = group->size(), me = group->rank();
  const Shape shape{P, 4};

  Tensor x = input_leaf(0, shape);  // replicated: the same on every rank
  Tensor y = wf::parallel::copy_to_group(*group, x);
  CHECK(mismatch(y, x) == "");

  // Each rank uses the one x in its own term: L = Σ_r Σ w_r ∘ x, dL/dx = Σ_r w_r on every rank.
  backward_weighted_sum(y, weights_of(me, shape));
  Tensor expected = Tensor::zeros(shape, kF64);
  for (int r = 0; r < P; ++r) expected = wf::add(expected, weights_of(r, shape));
  CHECK(mismatch(x.grad(), expected, reduction_tolerance(kF64)) == "");

  const std::int64_t volume = 2 * (P - 1) * shape[0] * shape[1] * kF64Bytes / P;
  expect_traffic(*group, Primitive::all_reduce, volume, volume);
}

TEST_CASE("functional all_to_all: exchanges blocks; backward is the same exchange", "[dist][functional]") {
  auto group = world_group("t.fn.all_to_all");
  const int P = group->size(), me = group->rank();
  const Shape shape{2 * P, 3};

  Tensor x = input_leaf(me, shape);
  Tensor y = wf::parallel::all_to_all(*group, x);
  std::vector<Tensor> blocks;  // block i of y is block me of rank i's x
  for (int i = 0; i < P; ++i) blocks.push_back(block(input_of(i, shape, kF64, kInputSeed), me, P));
  CHECK(mismatch(y, wf::cat(blocks, 0)) == "");

  backward_weighted_sum(y, weights_of(me, shape));
  // Block j of x_me went to rank j as its block me, weighted there by block me of w_j.
  std::vector<Tensor> grad_blocks;
  for (int j = 0; j < P; ++j) grad_blocks.push_back(block(weights_of(j, shape), me, P));
  CHECK(mismatch(x.grad(), wf::cat(grad_blocks, 0)) == "");

  const std::int64_t volume = (P - 1) * shape[0] * shape[1] * kF64Bytes / P;
  expect_traffic(*group, {{Primitive::all_to_all, calls_of(2, volume)}});
}

TEST_CASE("functional all_to_all_dims: re-shards between two dims; round trip and gradient", "[dist][functional]") {
  auto group = world_group("t.fn.all_to_all_dims");
  const int P = group->size(), me = group->rank();
  struct Case {
    Shape global;  // the whole tensor no rank holds at once
    std::int64_t scatter_dim, gather_dim;
  };
  const Case cases[] = {
      {{2, 2 * P, 2 * P, 3}, 2, 1},  // Ulysses: [B, n/P, h, d] → [B, n, h/P, d]
      {{2, 2 * P, 2 * P, 3}, 1, 2},  // and back: head-sharded → sequence-sharded
      {{2 * P, 3 * P}, 0, -1},       // scatter the leading dim
      {{2 * P, 3, 2 * P}, -1, 0},    // gather into the leading dim
  };
  for (const Case& c : cases) {
    INFO(fmt::format("global {} scatter_dim {} gather_dim {} on {} ranks", wf::shape_str(c.global), c.scatter_dim,
                     c.gather_dim, P));
    const std::int64_t s = wf::normalize_dim(c.scatter_dim, static_cast<std::int64_t>(c.global.size()));
    const std::int64_t g = wf::normalize_dim(c.gather_dim, static_cast<std::int64_t>(c.global.size()));
    // Rank r's shard of a global tensor along dim d.
    const auto shard = [P](const Tensor& t, std::int64_t d, int r) {
      const std::int64_t n = t.size(d) / P;
      return wf::narrow(t, d, r * n, n);
    };
    const Tensor whole = Tensor::randn_at(c.global, kInputSeed, 0, kF64);  // every rank draws the same
    const Tensor global_w = Tensor::randn_at(c.global, kWeightSeed, 0, kF64);

    Tensor x = shard(whole, g, me);
    x.set_requires_grad();
    Tensor y = wf::parallel::all_to_all_dims(*group, x, c.scatter_dim, c.gather_dim);
    CHECK(mismatch(y, shard(whole, s, me)) == "");
    {
      wf::autograd::NoGradGuard no_grad;
      CHECK(mismatch(wf::parallel::all_to_all_dims(*group, y, c.gather_dim, c.scatter_dim), x) == "");
    }

    // Together the ranks' y hold every element of `whole` once, so with w_r rank r's shard of
    // one global W the job's loss is Σ W ∘ whole, and x_me's gradient is its shard of W.
    backward_weighted_sum(y, shard(global_w, s, me));
    CHECK(mismatch(x.grad(), shard(global_w, g, me)) == "");

    // Forward, round trip and backward: three all-to-alls of this rank's shard.
    const std::int64_t volume = (P - 1) * x.numel() * kF64Bytes / P;
    expect_traffic(*group, {{Primitive::all_to_all, calls_of(3, volume)}});
  }
}

TEST_CASE("functional all_to_all_dims: bad dims fail on every rank before any communication",
          "[dist][functional]") {
  auto group = world_group("t.fn.all_to_all_dims.errors");
  const int P = group->size();
  const Tensor x = Tensor::zeros({2, 2 * P, P + 1}, kF64);  // P + 1 rows: indivisible for P > 1
  CHECK_THAT(error_of([&] { wf::parallel::all_to_all_dims(*group, x, 1, -2); }),
             Catch::Contains("are the same dim"));
  CHECK_THAT(error_of([&] { wf::parallel::all_to_all_dims(*group, x, 3, 1); }),
             Catch::Contains(fmt::format("scatter_dim 3 is out of range for shape [2, {}, {}]", 2 * P, P + 1)));
  if (P > 1) {
    CHECK_THAT(error_of([&] { wf::parallel::all_to_all_dims(*group, x, 2, 1); }),
               Catch::Contains("not divisible by the " + std::to_string(P) + " ranks"));
  }
  CHECK_THAT(error_of([&] { wf::parallel::all_gather(*group, Tensor()); }), Catch::Contains("undefined"));
  expect_traffic(*group, {});
}

namespace {

// Rank r's slice of t along dim d, t split into `ranks` equal slices.
Tensor slice_along(const Tensor& t, std::int64_t d, int r, int ranks) {
  const std::int64_t n = t.size(d) / ranks;
  return wf::narrow(t, d, r * n, n);
}

// Every rank's tensor from `of`, concatenated in rank order along d.
Tensor cat_over_ranks(int ranks, std::int64_t d, const std::function<Tensor(int)>& of) {
  std::vector<Tensor> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(of(r));
  return wf::cat(parts, d);
}

// The 3-d shape `piece` with dim d times `ranks`.
Shape widened(Shape piece, std::int64_t d, int ranks) {
  piece[static_cast<std::size_t>(d)] *= ranks;
  return piece;
}

// The dims along which the tests below split a [2, 3, 2] piece: the leading one (one contiguous
// block per rank), the token dim of [B, T, d] and the last one (strided blocks).
constexpr std::int64_t kDims[] = {0, 1, -1};

}  // namespace

TEST_CASE("functional all_gather_dim / reduce_scatter_dim: along any dim, each the other's adjoint",
          "[dist][functional]") {
  auto group = world_group("t.fn.gather_scatter_dim");
  const int P = group->size(), me = group->rank();
  for (const std::int64_t dim : kDims) {
    const std::int64_t d = wf::normalize_dim(dim, 3);
    const Shape piece{2, 3, 2}, whole = widened(piece, d, P);
    INFO(fmt::format("dim {} of {} on {} ranks", dim, wf::shape_str(whole), P));

    // all_gather_dim: every rank's piece in rank order; x_me's gradient is the sum over ranks
    // of slice me of their weights (each rank uses the gathered whole in its own term).
    Tensor x = input_leaf(me, piece);
    const Tensor y = wf::parallel::all_gather_dim(*group, x, dim);
    CHECK(mismatch(y, cat_over_ranks(P, d, [&](int r) { return input_of(r, piece, kF64, kInputSeed); })) == "");
    backward_weighted_sum(y, weights_of(me, whole));
    Tensor expected = Tensor::zeros(piece, kF64);
    for (int r = 0; r < P; ++r) expected = wf::add(expected, slice_along(weights_of(r, whole), d, me, P));
    CHECK(mismatch(x.grad(), expected, reduction_tolerance(kF64)) == "");

    // reduce_scatter_dim: slice me of the sum over ranks; slice r of x_me feeds rank r's
    // output, so x_me's gradient is the ranks' weights in rank order.
    Tensor z = input_leaf(me, whole);
    const Tensor s = wf::parallel::reduce_scatter_dim(*group, z, dim);
    Tensor sum = Tensor::zeros(piece, kF64);
    for (int r = 0; r < P; ++r) sum = wf::add(sum, slice_along(input_of(r, whole, kF64, kInputSeed), d, me, P));
    CHECK(mismatch(s, sum, reduction_tolerance(kF64)) == "");
    backward_weighted_sum(s, weights_of(me, piece));
    CHECK(mismatch(z.grad(), cat_over_ranks(P, d, [&](int r) { return weights_of(r, piece); })) == "");

    // Each of the two forwards and two backwards moves (P − 1)/P of the whole tensor.
    const std::int64_t volume = (P - 1) * z.numel() * kF64Bytes / P;
    expect_traffic(*group, {{Primitive::all_gather, calls_of(2, volume)},
                            {Primitive::reduce_scatter, calls_of(2, volume)}});
  }
  if (P > 1) {  // the same on every rank: each throws before any traffic
    const Tensor odd = Tensor::zeros({2, P + 1, 3}, kF64);
    CHECK_THAT(error_of([&] { wf::parallel::reduce_scatter_dim(*group, odd, 1); }),
               Catch::Contains(fmt::format("has extent {}, which does not split into {} equal slices", P + 1, P)));
    CHECK_THAT(error_of([&] { wf::parallel::scatter_dim(*group, odd, -2); }),
               Catch::Contains(fmt::format("has extent {}, which does not split into {} equal slices", P + 1, P)));
  }
  CHECK_THAT(error_of([&] { wf::parallel::all_gather_dim(*group, Tensor::zeros({2, 3}, kF64), 2); }),
             Catch::Contains("dim 2 is out of range for shape [2, 3]"));
  expect_traffic(*group, {});
}

TEST_CASE("functional scatter_dim / gather_dim: a replicated tensor and its slices along any dim",
          "[dist][functional]") {
  auto group = world_group("t.fn.scatter_gather_dim");
  const int P = group->size(), me = group->rank();
  for (const std::int64_t dim : kDims) {
    const std::int64_t d = wf::normalize_dim(dim, 3);
    const Shape whole = widened({2, 3, 2}, d, P);
    INFO(fmt::format("dim {} of {} on {} ranks", dim, wf::shape_str(whole), P));
    const Tensor value = Tensor::randn_at(whole, kInputSeed, 0, kF64);  // every rank draws the same
    const Tensor global_w = Tensor::randn_at(whole, kWeightSeed, 0, kF64);

    // scatter_dim: the slices' terms add up to Σ W ∘ x, so the replicated x's gradient is W.
    Tensor x = value.clone();
    x.set_requires_grad();
    const Tensor y = wf::parallel::scatter_dim(*group, x, dim);
    CHECK(mismatch(y, slice_along(value, d, me, P)) == "");
    backward_weighted_sum(y, slice_along(global_w, d, me, P));
    CHECK(mismatch(x.grad(), global_w) == "");

    // gather_dim: the output is replicated and counted once; each slice's gradient is its part.
    Tensor piece = slice_along(value, d, me, P).clone();
    piece.set_requires_grad();
    const Tensor g = wf::parallel::gather_dim(*group, piece, dim);
    CHECK(mismatch(g, value) == "");
    backward_weighted_sum(g, global_w);
    CHECK(mismatch(piece.grad(), slice_along(global_w, d, me, P)) == "");

    // One all-gather each: scatter's backward and gather's forward.
    const std::int64_t volume = (P - 1) * value.numel() * kF64Bytes / P;
    expect_traffic(*group, {{Primitive::all_gather, calls_of(2, volume)}});
  }
}
