// Errors: arguments that disagree across ranks (argument checks on), arguments that are wrong
// on their own, and — as hidden test cases run by their own CTest entries — the watchdog.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "dist_testing.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::comm::ReduceOp;
using namespace wf::test;

TEST_CASE("argument checks: ranks disagreeing on a collective all get the same clear error", "[dist][checks]") {
  const ArgumentChecksOn checks;
  auto group = world_group("t.checks");
  const int me = group->rank();
  if (group->size() < 2) return;  // nothing to disagree with

  // Rank 0 passes a different shape to all_reduce: every rank fails, none hangs.
  Tensor t = me == 0 ? Tensor::ones({3, 4}, DType::f32) : Tensor::ones({5}, DType::f32);
  CHECK_THAT(error_of([&] { group->all_reduce(t); }),
             Contains("argument mismatch in all_reduce on group 't.checks'") &&
                 Contains("rank 0 calls all_reduce(f32 [3, 4], sum)") &&
                 Contains("rank 1 calls all_reduce(f32 [5], sum)") && Contains("the shapes differ"));

  // A different dtype on the last rank, reported against rank 0.
  const int last = group->size() - 1;
  Tensor u = Tensor::ones({2}, me == last ? DType::f64 : DType::f32);
  CHECK_THAT(error_of([&] { group->all_gather(u); }),
             Contains("rank 0 calls all_gather(f32 [2])") &&
                 Contains(fmt::format("rank {} calls all_gather(f64 [2])", last)) && Contains("the dtypes differ"));

  // Different reduce ops, roots, and collectives.
  Tensor v = Tensor::ones({2}, DType::f32);
  CHECK_THAT(error_of([&] { group->all_reduce(v, me == 0 ? ReduceOp::max : ReduceOp::sum); }),
             Contains("all_reduce(f32 [2], max)") && Contains("the reduce ops differ"));
  CHECK_THAT(error_of([&] { group->broadcast(v, me == 0 ? 1 : 0); }),
             Contains("rank 0 calls broadcast(f32 [2], root 1)") && Contains("the roots differ"));
  CHECK_THAT(error_of([&] {
               if (me == 0) group->barrier();
               else group->all_reduce(v);
             }),
             Contains("rank 0 calls barrier()") && Contains("rank 1 calls all_reduce(f32 [2], sum)") &&
                 Contains("different collectives"));

  // all_gather_v: dim 0 may differ, the row-count lists may not.
  Tensor piece = Tensor::ones({me, 2}, DType::f32);
  CHECK(group->all_gather_v(piece).size(0) == group->size() * (group->size() - 1) / 2);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(group->size()), 1);
  if (me == 0) rows[1] = 2;  // rank 0 believes rank 1 sends two rows
  Tensor one = Tensor::ones({1, 2}, DType::f32);
  Tensor out = Tensor::empty({static_cast<std::int64_t>(group->size()) + (me == 0 ? 1 : 0), 2}, DType::f32);
  CHECK_THAT(error_of([&] { group->all_gather_v(one, out, rows); }), Contains("the lists of row counts differ"));

  // After the errors every rank is still in step: the next call works.
  Tensor w = Tensor::ones({3}, DType::f32);
  group->all_reduce(w);
  CHECK(w.to_vector<float>() == std::vector<float>(3, static_cast<float>(group->size())));
}

TEST_CASE("arguments that are wrong on every rank are errors naming the group and the fix", "[dist][checks]") {
  auto group = world_group("t.local_errors");
  const int C = group->size();
  Tensor ints = Tensor::ones({4}, DType::i32);
  CHECK_THAT(error_of([&] { group->all_reduce(ints, ReduceOp::avg); }),
             Contains("all_reduce on group 't.local_errors'") && Contains("avg of an integer tensor (i32)"));
  Tensor bytes = Tensor::ones({4}, DType::u8);
  CHECK_THAT(error_of([&] { group->all_reduce(bytes); }), Contains("dtype u8 cannot be reduced"));
  Tensor input = Tensor::ones({2, 3}, DType::f32);
  Tensor wrong = Tensor::empty({2, 3}, DType::f32);
  if (C > 1) {
    CHECK_THAT(error_of([&] { group->all_gather(input, wrong); }),
               Contains(fmt::format("for input f32 [2, 3] the output must be f32 [{}, 3], got f32 [2, 3]", 2 * C)));
  }
  Tensor odd = Tensor::ones({C * 2 + 1, 3}, DType::f32);
  if (C > 1) {
    CHECK_THAT(error_of([&] { group->reduce_scatter(odd); }),
               Contains(fmt::format("input dim 0 ({}, shape [{}, 3]) must be divisible by the group size {}", 2 * C + 1,
                                    2 * C + 1, C)));
    CHECK_THAT(error_of([&] { group->all_to_all(odd); }), Contains("must be divisible by the group size"));
  }
  Tensor scalar = Tensor::scalar(1.0);
  CHECK_THAT(error_of([&] { group->all_gather(scalar); }), Contains("needs at least one dimension"));
  CHECK_THAT(error_of([&] { group->broadcast(input, C); }), Contains(fmt::format("root {} is not a rank", C)));
  Tensor undefined;
  CHECK_THAT(error_of([&] { group->all_reduce(undefined); }), Contains("the tensor is undefined"));
  CHECK(group->traffic().total() == wf::comm::Traffic{});
  // Nothing was sent, so the group still works.
  group->barrier();
}

// ---- hidden cases, each run by its own CTest entry that expects the job to fail ----------

// dist_watchdog: rank 0 enters a collective the other ranks skip. Its watchdog (WF_COMM_TIMEOUT=3)
// must end the job with a message naming the group, the call and the rank.
TEST_CASE("watchdog: a rank that skips a collective ends the job", "[.watchdog]") {
  auto group = world_group("watchdog");
  if (group->rank() == 0) {
    Tensor t = Tensor::ones({4}, DType::f32);
    group->all_reduce(t);
    FAIL("all_reduce returned although rank 0 was alone in it");
  }
  // The others wait in the test main's final exchange; give them a longer watchdog so rank 0's
  // is the one that fires.
  wf::comm::set_watchdog_timeout(std::chrono::seconds(60));
}

// dist_run_main_abort runs this with WF_TEST_THROW_ON_RANK=1: that rank throws before the
// session starts, the others arrive here and wait for it forever, and run_main must abort them.
TEST_CASE("run_main: the ranks that did not throw", "[.run_main]") {
  wf::comm::set_watchdog_timeout(std::chrono::seconds(60));
  runtime().world().barrier();
}
