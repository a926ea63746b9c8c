// Every collective against the same result computed locally, for every dtype, several sizes
// (0 rows included) and every reduce op, with the traffic counters checked exactly after each
// call against the conventions of traffic.h.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "dist_testing.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::ReduceOp;
using namespace wf::test;

namespace {

constexpr std::int64_t kRowCounts[] = {0, 1, 5, 700};  // 700 rows of f64 go past the eager limit
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::avg, ReduceOp::min};

std::uint64_t seed_of(DType dtype, std::int64_t rows, int salt) {
  return 1000u * static_cast<std::uint64_t>(dtype) + 10u * static_cast<std::uint64_t>(rows) +
         static_cast<std::uint64_t>(salt);
}

bool op_applies(ReduceOp op, DType dtype) { return op != ReduceOp::avg || wf::is_floating(dtype); }

// The reduction of every rank's input, in f64 (exact for every input dtype but f64 itself).
Tensor reduced_inputs(int ranks, const Shape& shape, DType dtype, std::uint64_t seed, ReduceOp op) {
  Tensor acc = input_of(0, shape, dtype, seed).to(DType::f64);
  double* a = acc.data<double>();
  for (int r = 1; r < ranks; ++r) {
    const std::vector<double> x = input_of(r, shape, dtype, seed).to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      a[i] = op == ReduceOp::max ? std::max(a[i], x[i]) : op == ReduceOp::min ? std::min(a[i], x[i]) : a[i] + x[i];
    }
  }
  if (op == ReduceOp::avg) {
    for (std::int64_t i = 0; i < acc.numel(); ++i) a[i] /= ranks;
  }
  return acc;
}

// max and min pick one of the inputs, so they are exact; sums and averages round.
double tolerance_of(ReduceOp op, DType dtype) {
  return op == ReduceOp::max || op == ReduceOp::min ? 0.0 : reduction_tolerance(dtype);
}

}  // namespace

TEST_CASE("all_reduce: sum, max, avg and min for every dtype and size", "[dist][collectives]") {
  auto group = world_group("t.all_reduce");
  const int C = group->size();
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : kRowCounts) {
      for (ReduceOp op : kOps) {
        if (!op_applies(op, dtype)) continue;
        const Shape shape{rows, 3};
        const std::uint64_t seed = seed_of(dtype, rows, static_cast<int>(op));
        INFO(fmt::format("{} {} {}", wf::dtype_name(dtype), wf::shape_str(shape), wf::comm::reduce_op_name(op)));
        Tensor t = input_of(group->rank(), shape, dtype, seed);
        group->all_reduce(t, op);
        const Tensor expected = reduced_inputs(C, shape, dtype, seed, op);
        CHECK((op == ReduceOp::sum ? sum_mismatch(t, expected, abs_sum_of_inputs(C, shape, dtype, seed), C)
                                   : mismatch(t.to(DType::f64), expected, tolerance_of(op, dtype))) == "");
        const std::int64_t volume = 2 * (C - 1) * static_cast<std::int64_t>(t.nbytes()) / C;
        expect_traffic(*group, Primitive::all_reduce, volume, volume);
      }
    }
  }
}

TEST_CASE("all_reduce of 3-d tensors and a single element", "[dist][collectives]") {
  auto group = world_group("t.all_reduce.shapes");
  for (const Shape& shape : {Shape{2, 3, 4}, Shape{1}, Shape{}}) {
    INFO(wf::shape_str(shape));
    Tensor t = input_of(group->rank(), shape, DType::f32, 7);
    group->all_reduce(t);
    CHECK(mismatch(t.to(DType::f64), reduced_inputs(group->size(), shape, DType::f32, 7, ReduceOp::sum), 1e-6) == "");
  }
}

TEST_CASE("all_gather concatenates every rank's piece in rank order", "[dist][collectives]") {
  auto group = world_group("t.all_gather");
  const int C = group->size();
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : kRowCounts) {
      const Shape shape{rows, 3};
      const std::uint64_t seed = seed_of(dtype, rows, 11);
      INFO(fmt::format("{} {}", wf::dtype_name(dtype), wf::shape_str(shape)));
      const Tensor input = input_of(group->rank(), shape, dtype, seed);
      const Tensor output = group->all_gather(input);
      CHECK(mismatch(output, concat_inputs(C, shape, dtype, seed)) == "");
      // (C−1)/C of the output, each way.
      const std::int64_t volume = (C - 1) * static_cast<std::int64_t>(output.nbytes()) / C;
      expect_traffic(*group, Primitive::all_gather, volume, volume);
    }
  }
}

TEST_CASE("all_gather into a caller's output, also when the input is a slice of it", "[dist][collectives]") {
  auto group = world_group("t.all_gather.inplace");
  const int C = group->size(), me = group->rank();
  const Shape piece{4, 2};
  Tensor output = Tensor::zeros({4 * C, 2}, DType::f32);
  Tensor mine = output.slice0(4 * me, 4 * me + 4);
  mine.copy_(input_of(me, piece, DType::f32, 21));
  group->all_gather(mine, output);
  CHECK(mismatch(output, concat_inputs(C, piece, DType::f32, 21)) == "");
}

TEST_CASE("reduce_scatter: each rank gets its slice of the reduction", "[dist][collectives]") {
  auto group = world_group("t.reduce_scatter");
  const int C = group->size(), me = group->rank();
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : kRowCounts) {
      if (rows == 700) rows = 70;  // the input is C times larger here
      for (ReduceOp op : kOps) {
        if (!op_applies(op, dtype)) continue;
        const Shape shape{C * rows, 3};
        const std::uint64_t seed = seed_of(dtype, rows, 20 + static_cast<int>(op));
        INFO(fmt::format("{} {} {}", wf::dtype_name(dtype), wf::shape_str(shape), wf::comm::reduce_op_name(op)));
        const Tensor input = input_of(me, shape, dtype, seed);
        const Tensor output = group->reduce_scatter(input, op);
        const Tensor expected = reduced_inputs(C, shape, dtype, seed, op).slice0(me * rows, (me + 1) * rows);
        const Tensor abs_sum = abs_sum_of_inputs(C, shape, dtype, seed).slice0(me * rows, (me + 1) * rows);
        CHECK((op == ReduceOp::sum ? sum_mismatch(output, expected, abs_sum, C)
                                   : mismatch(output.to(DType::f64), expected, tolerance_of(op, dtype))) == "");
        const std::int64_t volume = (C - 1) * static_cast<std::int64_t>(input.nbytes()) / C;
        expect_traffic(*group, Primitive::reduce_scatter, volume, volume);
      }
    }
  }
}

TEST_CASE("all_to_all: slice i of every rank goes to rank i", "[dist][collectives]") {
  auto group = world_group("t.all_to_all");
  const int C = group->size(), me = group->rank();
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : kRowCounts) {
      if (rows == 700) rows = 70;
      const Shape shape{C * rows, 2, 2};
      const std::uint64_t seed = seed_of(dtype, rows, 31);
      INFO(fmt::format("{} {}", wf::dtype_name(dtype), wf::shape_str(shape)));
      const Tensor output = group->all_to_all(input_of(me, shape, dtype, seed));
      Tensor expected = Tensor::empty(shape, dtype);
      for (int r = 0; r < C; ++r) {
        expected.slice0(r * rows, (r + 1) * rows).copy_(input_of(r, shape, dtype, seed).slice0(me * rows, (me + 1) * rows));
      }
      CHECK(mismatch(output, expected) == "");
      const std::int64_t volume = (C - 1) * static_cast<std::int64_t>(output.nbytes()) / C;
      expect_traffic(*group, Primitive::all_to_all, volume, volume);
    }
  }
}

TEST_CASE("broadcast from the first and the last rank", "[dist][collectives]") {
  auto group = world_group("t.broadcast");
  const int C = group->size(), me = group->rank();
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : kRowCounts) {
      for (int root : {0, C - 1}) {
        const Shape shape{rows, 3};
        const std::uint64_t seed = seed_of(dtype, rows, 40 + root);
        INFO(fmt::format("{} {} root {}", wf::dtype_name(dtype), wf::shape_str(shape), root));
        Tensor t = me == root ? input_of(root, shape, dtype, seed) : Tensor::zeros(shape, dtype);
        group->broadcast(t, root);
        CHECK(mismatch(t, input_of(root, shape, dtype, seed)) == "");
        // The root sends S, every other rank receives S; nothing moves in a group of one.
        const std::int64_t bytes = C > 1 ? static_cast<std::int64_t>(t.nbytes()) : 0;
        expect_traffic(*group, Primitive::broadcast, me == root ? bytes : 0, me == root ? 0 : bytes);
      }
    }
  }
}

TEST_CASE("all_gather_v: unequal, empty and non-divisible pieces", "[dist][collectives]") {
  auto group = world_group("t.all_gather_v");
  const int C = group->size(), me = group->rank();
  // Per pattern, rank r contributes rows(r) rows: zeros, uneven, all empty, one non-empty.
  const std::vector<std::function<std::int64_t(int)>> patterns = {
      [](int r) { return static_cast<std::int64_t>((3 * r + 1) % 4); },
      [](int r) { return static_cast<std::int64_t>(r % 2 == 0 ? 0 : r + 2); },
      [](int) { return std::int64_t{0}; },
      [C](int r) { return static_cast<std::int64_t>(r == C - 1 ? 5 : 0); },
  };
  for (DType dtype : kDtypes) {
    for (std::size_t p = 0; p < patterns.size(); ++p) {
      std::vector<std::int64_t> rows(static_cast<std::size_t>(C));
      for (int r = 0; r < C; ++r) rows[static_cast<std::size_t>(r)] = patterns[p](r);
      const std::uint64_t seed = seed_of(dtype, static_cast<std::int64_t>(p), 50);
      INFO(fmt::format("{} rows [{}]", wf::dtype_name(dtype), fmt::join(rows, ", ")));
      // Rank r's piece is the first rows(r) rows of its input_of(r, [16, 2]).
      auto piece = [&](int r) { return input_of(r, {16, 2}, dtype, seed).slice0(0, rows[static_cast<std::size_t>(r)]); };
      const std::int64_t total = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
      Tensor expected = Tensor::empty({total, 2}, dtype);
      for (int r = 0, offset = 0; r < C; offset += static_cast<int>(rows[static_cast<std::size_t>(r)]), ++r) {
        expected.slice0(offset, offset + rows[static_cast<std::size_t>(r)]).copy_(piece(r));
      }
      const std::int64_t row_bytes = 2 * static_cast<std::int64_t>(wf::dtype_size(dtype));
      const std::int64_t own = rows[static_cast<std::size_t>(me)] * row_bytes;

      CHECK(mismatch(group->all_gather_v(piece(me)), expected) == "");  // learns the row counts itself
      expect_traffic(*group, Primitive::all_gather, (C - 1) * own, total * row_bytes - own);

      Tensor output = Tensor::empty({total, 2}, dtype);
      group->all_gather_v(piece(me), output, rows);
      CHECK(mismatch(output, expected) == "");
      expect_traffic(*group, Primitive::all_gather, (C - 1) * own, total * row_bytes - own);
    }
  }
}

TEST_CASE("barrier counts no traffic", "[dist][collectives]") {
  auto group = world_group("t.barrier");
  group->barrier();
  group->barrier();
  CHECK(group->traffic().total() == wf::comm::Traffic{});
}
