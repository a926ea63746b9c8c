// Group::ireduce_scatter and Group::iall_gather, the non-blocking collectives of ZeRO (gradients
// reduce-scattered per bucket during the backward, parameters all-gathered after the step):
// the blocking forms' results and an f64 reference computed here from every rank's inputs, on
// flat views at an offset into larger buffers, several in flight around compute, the traffic
// of traffic.h counted when posted, and a bad output refused with one error on every rank.
// Reductions match the blocking form bit for bit only where the order of the sum cannot differ
// (two ranks): the blocking call is MPI's tuned algorithm, the non-blocking one libnbc's.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "dist_testing.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::ReduceOp;
using namespace wf::test;

namespace {

constexpr DType kFloatDtypes[] = {DType::f32, DType::f64, DType::bf16};

// Σ over ranks of each rank's input (as its dtype holds it), in f64.
Tensor reference_sum(int ranks, const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor sum = Tensor::zeros(shape, DType::f64);
  double* s = sum.data<double>();
  for (int r = 0; r < ranks; ++r) {
    const std::vector<double> v = input_of(r, shape, dtype, seed).to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i) s[i] += v[i];
  }
  return sum;
}

// Equal to `expected` within the rounding of a C-rank reduction (exactly for integers).
std::string reduction_mismatch(const Tensor& actual, const Tensor& expected, int ranks) {
  return mismatch(actual.to(DType::f64), expected.to(DType::f64), ranks * reduction_tolerance(actual.dtype()));
}

// Work for the caller while requests are in flight (what the backward's kernels would be).
double compute(std::int64_t n) {
  double acc = 0.0;
  for (std::int64_t i = 0; i < n; ++i) acc += std::sin(static_cast<double>(i)) * 1e-9;
  return acc;
}

// The neighbours of a view, which must survive the collective: exact in every dtype tested.
constexpr double kSentinel = -4096.0;

// A flat buffer of sentinels with `n` elements starting at `offset`, viewed as [n].
struct PaddedView {
  Tensor buffer, view;
  PaddedView(std::int64_t offset, std::int64_t n, DType dtype)
      : buffer(Tensor::full({offset + n + 5}, kSentinel, dtype)), view(buffer.slice0(offset, offset + n)) {}
  // Every element outside the view is still the sentinel.
  bool neighbours_untouched() const {
    const std::vector<double> v = buffer.to_vector<double>();
    const std::int64_t first = view.storage_offset() - buffer.storage_offset();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(v.size()); ++i) {
      if ((i < first || i >= first + view.numel()) && v[static_cast<std::size_t>(i)] != kSentinel) return false;
    }
    return true;
  }
};

}  // namespace

TEST_CASE("ireduce_scatter / iall_gather give the blocking forms' results and the f64 reference",
          "[dist][collectives][ireduce_scatter]") {
  auto group = world_group("t.ireduce_scatter");
  const int C = group->size(), me = group->rank();
  const std::int64_t n = 1000;  // f32 rows of the output past the eager limit at 4 bytes × 1000 × 3
  for (DType dtype : kFloatDtypes) {
    INFO(wf::dtype_name(dtype));
    const Shape full{C * n, 3}, piece{n, 3};
    const std::uint64_t seed = 700 + static_cast<std::uint64_t>(dtype);

    const Tensor input = input_of(me, full, dtype, seed);
    Tensor scattered = Tensor::empty(piece, dtype);
    group->ireduce_scatter(input, scattered).wait();
    const Tensor blocking = group->reduce_scatter(input);
    const Tensor reference = reference_sum(C, full, dtype, seed).slice0(me * n, (me + 1) * n);
    const Tensor abs_sum = abs_sum_of_inputs(C, full, dtype, seed).slice0(me * n, (me + 1) * n);
    CHECK(sum_mismatch(scattered, reference, abs_sum, C) == "");
    if (C <= 2) {
      CHECK(same_bytes(scattered, blocking));
    } else {
      CHECK(sum_mismatch(scattered, blocking, abs_sum, C, /*results=*/2) == "");
    }

    const Tensor mine = input_of(me, piece, dtype, seed + 1);
    Tensor gathered = Tensor::empty(full, dtype);
    group->iall_gather(mine, gathered).wait();
    CHECK(same_bytes(gathered, group->all_gather(mine)));
    CHECK(same_bytes(gathered, concat_inputs(C, piece, dtype, seed + 1)));
  }
  // avg and max reduce like the blocking form too (avg divides after the f32 sum).
  for (ReduceOp op : {ReduceOp::avg, ReduceOp::max}) {
    INFO(wf::comm::reduce_op_name(op));
    const Tensor input = input_of(me, {C * 5}, DType::f32, 720);
    Tensor output = Tensor::empty({5}, DType::f32);
    group->ireduce_scatter(input, output, op).wait();
    CHECK(reduction_mismatch(output, group->reduce_scatter(input, op), C) == "");
  }
  group->traffic().reset();
}

TEST_CASE("ireduce_scatter / iall_gather on flat views at an offset leave the neighbours alone",
          "[dist][collectives][ireduce_scatter]") {
  auto group = world_group("t.ireduce_scatter.views");
  const int C = group->size(), me = group->rank();
  const std::int64_t n = 37;
  for (DType dtype : kFloatDtypes) {
    INFO(wf::dtype_name(dtype));
    const std::uint64_t seed = 740 + static_cast<std::uint64_t>(dtype);
    // A gradient bucket in the middle of a flat buffer, reduce-scattered into a shard that is
    // itself a view into another buffer.
    PaddedView gradients(11, C * n, dtype), shard(3, n, dtype);
    gradients.view.copy_(input_of(me, {C * n}, dtype, seed));
    group->ireduce_scatter(gradients.view, shard.view).wait();
    CHECK(sum_mismatch(shard.view, reference_sum(C, {C * n}, dtype, seed).slice0(me * n, (me + 1) * n),
                       abs_sum_of_inputs(C, {C * n}, dtype, seed).slice0(me * n, (me + 1) * n), C) == "");
    CHECK(shard.neighbours_untouched());
    CHECK(gradients.neighbours_untouched());
    CHECK(same_bytes(gradients.view, input_of(me, {C * n}, dtype, seed)));  // the input is only read

    // The parameter all-gather in place: this rank's shard is its own slice of the output.
    PaddedView parameters(7, C * n, dtype);
    Tensor own = parameters.view.slice0(me * n, (me + 1) * n);
    own.copy_(input_of(me, {n}, dtype, seed + 1));
    group->iall_gather(own, parameters.view).wait();
    CHECK(same_bytes(parameters.view, concat_inputs(C, {n}, dtype, seed + 1)));
    CHECK(parameters.neighbours_untouched());

    // ... and from a separate view.
    PaddedView source(5, n, dtype), target(2, C * n, dtype);
    source.view.copy_(input_of(me, {n}, dtype, seed + 2));
    group->iall_gather(source.view, target.view).wait();
    CHECK(same_bytes(target.view, concat_inputs(C, {n}, dtype, seed + 2)));
    CHECK(target.neighbours_untouched());
  }
  group->traffic().reset();
}

TEST_CASE("ireduce_scatter / iall_gather: several in flight around compute, counted when posted, waited in order",
          "[dist][collectives][ireduce_scatter]") {
  auto group = world_group("t.ireduce_scatter.inflight");
  const int C = group->size(), me = group->rank();
  // Buckets of a backward: reduce-scatters and all-gathers of different sizes and dtypes (the
  // largest past the eager limit), posted between stretches of compute.
  struct Call {
    bool gather;
    DType dtype;
    std::int64_t n;  // elements of the piece (the reduce-scatter's output, the all-gather's input)
  };
  const std::vector<Call> calls = {{false, DType::f32, 20000}, {true, DType::bf16, 300}, {false, DType::bf16, 4000},
                                   {true, DType::f32, 0},      {false, DType::f64, 9},   {true, DType::f64, 5000}};
  std::vector<Tensor> inputs, outputs;
  std::vector<wf::comm::Request> requests;
  std::int64_t scatter_bytes = 0, gather_bytes = 0;
  wf::comm::Traffic scatter_traffic, gather_traffic;
  double sink = 0.0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const std::uint64_t seed = 760 + i;
    inputs.push_back(input_of(me, {c.gather ? c.n : C * c.n}, c.dtype, seed));
    outputs.push_back(Tensor::empty({c.gather ? C * c.n : c.n}, c.dtype));
    requests.push_back(c.gather ? group->iall_gather(inputs.back(), outputs.back())
                                : group->ireduce_scatter(inputs.back(), outputs.back()));
    // traffic.h: (C−1)/C of the all-gather's output and of the reduce-scatter's input.
    const std::int64_t bytes = (C - 1) * c.n * static_cast<std::int64_t>(wf::dtype_size(c.dtype));
    (c.gather ? gather_bytes : scatter_bytes) += bytes;
    (c.gather ? gather_traffic : scatter_traffic) += one_call(bytes, bytes);
    sink += compute(200'000);
  }
  // Counted when posted: before any wait.
  CHECK(group->traffic().get(Primitive::reduce_scatter) == scatter_traffic);
  CHECK(group->traffic().get(Primitive::all_gather) == gather_traffic);
  CHECK(scatter_traffic.bytes_sent == scatter_bytes);
  CHECK(gather_traffic.bytes_received == gather_bytes);
  sink += compute(1'000'000);
  for (wf::comm::Request& request : requests) request.wait();
  CHECK(std::isfinite(sink));
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const std::uint64_t seed = 760 + i;
    INFO(fmt::format("call {}: {} {} n={}", i, c.gather ? "iall_gather" : "ireduce_scatter", wf::dtype_name(c.dtype),
                     c.n));
    if (c.gather) {
      CHECK(same_bytes(outputs[i], concat_inputs(C, {c.n}, c.dtype, seed)));
    } else {
      const Tensor reference = reference_sum(C, {C * c.n}, c.dtype, seed).slice0(me * c.n, (me + 1) * c.n);
      CHECK(sum_mismatch(outputs[i], reference,
                         abs_sum_of_inputs(C, {C * c.n}, c.dtype, seed).slice0(me * c.n, (me + 1) * c.n), C) == "");
    }
  }
  // Nothing else was counted.
  expect_traffic(*group, {{Primitive::reduce_scatter, scatter_traffic}, {Primitive::all_gather, gather_traffic}});
}

TEST_CASE("ireduce_scatter / iall_gather refuse a wrongly shaped output with the same error on every rank",
          "[dist][collectives][ireduce_scatter]") {
  auto group = world_group("t.ireduce_scatter.bad");
  const int C = group->size(), me = group->rank();
  const ArgumentChecksOn checks;
  // Hash of each rank's message, gathered: every rank must have thrown, and the same message.
  auto same_on_every_rank = [&](const std::string& message) {
    Tensor mine = Tensor::from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(
                                          std::hash<std::string>{}(message))},
                                      {1});
    const std::vector<std::int64_t> all = group->all_gather(mine).to_vector<std::int64_t>();
    group->traffic().reset();
    for (std::int64_t h : all) {
      if (h != all[0]) return false;
    }
    return true;
  };
  // Only rank 0's output is wrong: the others learn it in the argument check and throw too.
  const Tensor input = input_of(me, {C * 4}, DType::f32, 780);
  Tensor scatter_out = Tensor::empty({me == 0 ? 5 : 4}, DType::f32);
  const std::string scatter_error = error_of([&] { group->ireduce_scatter(input, scatter_out).wait(); });
  CHECK_THAT(scatter_error, Catch::Matchers::Contains("the output must be f32 [4], got f32 [5]"));
  CHECK(same_on_every_rank(scatter_error));

  const Tensor piece = input_of(me, {4}, DType::f32, 781);
  Tensor gather_out = Tensor::empty({me == 0 ? C * 4 + 1 : C * 4}, DType::f32);
  const std::string gather_error = error_of([&] { group->iall_gather(piece, gather_out).wait(); });
  CHECK_THAT(gather_error, Catch::Matchers::Contains(fmt::format("the output must be f32 [{}], got f32 [{}]", C * 4,
                                                                 C * 4 + 1)));
  CHECK(same_on_every_rank(gather_error));
  expect_traffic(*group, {});  // a refused call moves and counts nothing

  // The group still works afterwards: the failed calls were numbered alike on every rank.
  Tensor output = Tensor::empty({4}, DType::f32);
  group->ireduce_scatter(input, output).wait();
  CHECK(reduction_mismatch(output, reference_sum(C, {C * 4}, DType::f32, 780).slice0(me * 4, me * 4 + 4), C) == "");
}

// dist_watchdog_ireduce_scatter: rank 0 posts a reduce-scatter the others never post; its
// wait() must end the job through the watchdog with a message, not hang.
TEST_CASE("watchdog: a rank alone in an ireduce_scatter ends the job", "[.watchdog_ireduce_scatter]") {
  auto group = world_group("watchdog.irs");
  if (group->rank() == 0) {
    const Tensor input = Tensor::ones({4 * group->size()}, DType::f32);
    Tensor output = Tensor::empty({4}, DType::f32);
    wf::comm::Request request = group->ireduce_scatter(input, output);
    request.wait();
    FAIL("ireduce_scatter completed although rank 0 was alone in it");
  }
  wf::comm::set_watchdog_timeout(std::chrono::seconds(60));
}
