// Argument checks on: a collective whose local checks fail on only some ranks fails on every
// rank at once, with one message (the first failing rank's, naming all of them), and leaves
// the group usable. Without the shared error flag the other ranks would wait inside the
// collective until the watchdog ended the job.
#include <fmt/format.h>

#include <functional>

#include "dist_testing.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::comm::ReduceOp;
using namespace wf::test;

namespace {

// The error `call` throws on this rank, after checking that every rank got the very same text
// (their hashes all-gathered over `group`, uncounted traffic aside).
std::string same_error_on_every_rank(wf::comm::Group& group, const std::function<void()>& call) {
  const std::string message = error_of(call);
  const auto hash = static_cast<std::int64_t>(std::hash<std::string>{}(message));
  Tensor all = group.all_gather(Tensor::from_vector(std::vector<std::int64_t>{hash}, {1}));
  for (std::int64_t r = 0; r < group.size(); ++r) {
    INFO("rank " << r << "'s message differs from this rank's: " << message);
    CHECK(all.at(r) == static_cast<double>(hash));
  }
  group.traffic().reset();
  return message;
}

}  // namespace

TEST_CASE("a local check failing on some ranks fails every rank at once with one message",
          "[dist][checks][local_errors]") {
  const ArgumentChecksOn checks;
  auto group = world_group("t.local_check");
  const int C = group->size(), me = group->rank(), last = C - 1;
  if (C < 2) return;  // a world of one has no other rank to keep waiting

  // Only the last rank averages an integer tensor.
  Tensor t = me == last ? Tensor::ones({4}, DType::i32) : Tensor::ones({4}, DType::f32);
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->all_reduce(t, ReduceOp::avg); }),
             Contains("all_reduce on group 't.local_check': the arguments failed their checks on group rank(s) [" +
                      std::to_string(last) + "] of " + std::to_string(C)) &&
                 Contains(fmt::format("rank {}: ", last)) && Contains("avg of an integer tensor (i32)"));

  // Only rank 0 passes an output of the wrong shape.
  Tensor input = Tensor::ones({2, 3}, DType::f32);
  Tensor output = Tensor::empty({me == 0 ? 2 : 2 * C, 3}, DType::f32);
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->all_gather(input, output); }),
             Contains("failed their checks on group rank(s) [0]") &&
                 Contains(fmt::format("the output must be f32 [{}, 3], got f32 [2, 3]", 2 * C)));

  // Every rank but 0 names a root outside the group: all listed, the first one reports.
  Tensor b = Tensor::ones({3}, DType::f32);
  std::string others;
  for (int r = 1; r < C; ++r) others += (r > 1 ? ", " : "") + std::to_string(r);
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->broadcast(b, me == 0 ? 0 : C); }),
             Contains("broadcast on group 't.local_check': the arguments failed their checks on group rank(s) [" +
                      others + "]") &&
                 Contains(fmt::format("rank 1: broadcast on group 't.local_check': root {} is not a rank", C)));

  // The group is still in step: the next collective works.
  Tensor w = Tensor::ones({3}, DType::f32);
  group->all_reduce(w);
  CHECK(w.to_vector<float>() == std::vector<float>(3, static_cast<float>(C)));
}

TEST_CASE("the forms that allocate their output share a failing check too", "[dist][checks][local_errors]") {
  const ArgumentChecksOn checks;
  auto group = world_group("t.local_check_alloc");
  const int C = group->size(), me = group->rank();
  if (C < 2) return;
  const Tensor scalar = Tensor::scalar(1.0), rows = Tensor::ones({C, 2}, DType::f32);
  // Rank 1 passes a scalar where the others pass rows.
  const Tensor& input = me == 1 ? scalar : rows;
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->all_gather(input); }),
             Contains("all_gather on group 't.local_check_alloc': the arguments failed their checks on group rank(s) "
                      "[1]") &&
                 Contains("needs at least one dimension"));
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->all_gather_v(input); }),
             Contains("all_gather_v on group 't.local_check_alloc'") && Contains("needs at least one dimension"));
  // Rank 0's dim 0 does not divide by the group size.
  const Tensor odd = Tensor::ones({C + 1, 2}, DType::f32);
  const Tensor& scattered = me == 0 ? odd : rows;
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->reduce_scatter(scattered); }),
             Contains("failed their checks on group rank(s) [0]") && Contains("must be divisible by the group size"));
  CHECK_THAT(same_error_on_every_rank(*group, [&] { group->all_to_all(scattered); }),
             Contains("all_to_all on group") && Contains("must be divisible by the group size"));
  CHECK(group->traffic().total() == wf::comm::Traffic{});  // nothing was sent
  CHECK(group->all_gather(rows).size(0) == C * C);          // and the group still works
}
