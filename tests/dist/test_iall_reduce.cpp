// Group::iall_reduce, the non-blocking all-reduce (the overlapped gradient all-reduce's
// primitive): the blocking all_reduce's result and its traffic, with several in flight at once
// and completed out of order, for sum / max / avg and a 16-bit dtype. Bit for bit where the
// order of the sum cannot differ (integers, max, two ranks); otherwise within a reduction's
// rounding, since the blocking call is MPI's tuned algorithm and may add in another order.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "dist_testing.h"

using wf::DType;
using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::ReduceOp;
using namespace wf::test;

TEST_CASE("iall_reduce: several in flight give the blocking all_reduce's result and traffic",
          "[dist][collectives][iall_reduce]") {
  auto group = world_group("t.iall_reduce");
  const int C = group->size();
  struct Call {
    DType dtype;
    std::int64_t rows;
    ReduceOp op;
  };
  // 3000 rows of f32 go past the eager limit.
  const std::vector<Call> calls = {{DType::f32, 3000, ReduceOp::sum}, {DType::f64, 7, ReduceOp::max},
                                   {DType::bf16, 500, ReduceOp::sum}, {DType::f32, 0, ReduceOp::sum},
                                   {DType::f32, 40, ReduceOp::avg},   {DType::i64, 9, ReduceOp::sum}};
  std::vector<Tensor> expected, pending;
  std::int64_t volume = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    Tensor t = input_of(group->rank(), {c.rows, 3}, c.dtype, 500 + i);
    group->all_reduce(t, c.op);
    expected.push_back(t);
    volume += 2 * (C - 1) * static_cast<std::int64_t>(t.nbytes()) / C;
  }
  group->traffic().reset();

  std::vector<wf::comm::Request> requests;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    pending.push_back(input_of(group->rank(), {calls[i].rows, 3}, calls[i].dtype, 500 + i));
    requests.push_back(group->iall_reduce(pending.back(), calls[i].op));
  }
  // Complete newest first; test() on the oldest along the way may already finish it.
  requests.front().test();
  for (std::size_t i = requests.size(); i-- > 0;) requests[i].wait();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO(fmt::format("call {}: {} {}", i, wf::dtype_name(calls[i].dtype), wf::comm::reduce_op_name(calls[i].op)));
    const bool exact = C <= 2 || !wf::is_floating(calls[i].dtype) || calls[i].op == ReduceOp::max;
    if (expected[i].nbytes() == 0) {
      CHECK(pending[i].numel() == 0);  // nothing to compare (and memcmp may not see null pointers)
    } else if (exact) {
      CHECK(std::memcmp(pending[i].raw_data(), expected[i].raw_data(), expected[i].nbytes()) == 0);
    } else {
      // Two roundings of the same sum, possibly in different orders (libnbc and the blocking form).
      const std::string difference =
          calls[i].op == ReduceOp::sum
              ? sum_mismatch(pending[i], expected[i], abs_sum_of_inputs(C, {calls[i].rows, 3}, calls[i].dtype, 500 + i), C,
                             /*results=*/2)
              : mismatch(pending[i], expected[i], C * reduction_tolerance(calls[i].dtype));
      INFO(difference);
      CHECK(difference.empty());
    }
  }
  const wf::comm::Traffic counted = group->traffic().get(Primitive::all_reduce);
  CHECK(counted.bytes_sent == volume);
  CHECK(counted.bytes_received == volume);
  group->traffic().reset();
}

TEST_CASE("iall_reduce refuses what all_reduce refuses, before posting", "[dist][collectives][iall_reduce]") {
  auto group = world_group("t.iall_reduce.bad");
  Tensor ints = Tensor::zeros({4}, DType::i32);
  const std::string message = error_of([&] { group->iall_reduce(ints, ReduceOp::avg).wait(); });
  CHECK(message.find("avg of an integer tensor") != std::string::npos);
}
