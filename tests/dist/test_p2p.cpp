// Point-to-point: blocking pairs, a ring of sendrecv, non-blocking all-pairs exchanges with
// request wait/test, self-messages (counted as zero), and size mismatches reported on receive.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "dist_testing.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::Request;
using namespace wf::test;

namespace {
constexpr DType kSomeDtypes[] = {DType::f32, DType::bf16, DType::i64};
}

TEST_CASE("send / recv between rank pairs", "[dist][p2p]") {
  auto group = world_group("t.send_recv");
  const int C = group->size(), me = group->rank();
  const int partner = me % 2 == 0 ? me + 1 : me - 1;  // an odd world leaves the last rank out
  for (DType dtype : kSomeDtypes) {
    const Shape shape{6, 5};
    INFO(wf::dtype_name(dtype));
    Tensor received = Tensor::zeros(shape, dtype);
    const std::int64_t bytes = static_cast<std::int64_t>(received.nbytes());
    if (partner >= C) {
      CHECK(group->traffic().total() == wf::comm::Traffic{});
      continue;
    }
    if (me % 2 == 0) {  // even ranks send first, odd ranks receive first: no deadlock
      group->send(input_of(me, shape, dtype, 1), partner, 3);
      group->recv(received, partner, 4);
    } else {
      group->recv(received, partner, 3);
      group->send(input_of(me, shape, dtype, 1), partner, 4);
    }
    CHECK(mismatch(received, input_of(partner, shape, dtype, 1)) == "");
    expect_traffic(*group, {{Primitive::send, one_call(bytes, 0)}, {Primitive::recv, one_call(0, bytes)}});
  }
}

TEST_CASE("sendrecv around a ring, and to this rank itself", "[dist][p2p]") {
  auto group = world_group("t.sendrecv");
  const int C = group->size(), me = group->rank();
  const int next = (me + 1) % C, prev = (me + C - 1) % C;
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : {0, 3, 2000}) {  // 2000·4·8 bytes: past the eager limit
      const Shape shape{rows, 4};
      INFO(fmt::format("{} {}", wf::dtype_name(dtype), wf::shape_str(shape)));
      Tensor received = Tensor::zeros(shape, dtype);
      group->sendrecv(input_of(me, shape, dtype, 2), next, received, prev, 9);
      CHECK(mismatch(received, input_of(prev, shape, dtype, 2)) == "");
      // In a world of one, next and prev are this rank: zero.
      const std::int64_t bytes = C > 1 ? static_cast<std::int64_t>(received.nbytes()) : 0;
      expect_traffic(*group, {{Primitive::send, one_call(bytes, 0)}, {Primitive::recv, one_call(0, bytes)}});
    }
  }
  // To and from itself: the data arrives, the counters stay at zero.
  const Shape shape{3, 4};
  Tensor back = Tensor::zeros(shape, DType::f32);
  group->sendrecv(input_of(me, shape, DType::f32, 3), me, back, me, 1);
  CHECK(mismatch(back, input_of(me, shape, DType::f32, 3)) == "");
  CHECK(group->traffic().total() == wf::comm::Traffic{});
  // A self-message through isend / irecv.
  Tensor again = Tensor::zeros(shape, DType::f32);
  Request in = group->irecv(again, me, 2);
  group->isend(input_of(me, shape, DType::f32, 5), me, 2).wait();
  in.wait();
  CHECK(mismatch(again, input_of(me, shape, DType::f32, 5)) == "");
  CHECK(group->traffic().total() == wf::comm::Traffic{});
}

TEST_CASE("isend / irecv between every pair, completed with wait", "[dist][p2p]") {
  auto group = world_group("t.isend_irecv");
  const int C = group->size(), me = group->rank();
  const Shape shape{2, 3};
  std::vector<Tensor> inbox;
  std::vector<Request> requests;
  for (int peer = 0; peer < C; ++peer) inbox.push_back(Tensor::zeros(shape, DType::f64));
  for (int peer = 0; peer < C; ++peer) requests.push_back(group->irecv(inbox[static_cast<std::size_t>(peer)], peer, peer));
  // What rank `me` sends to `peer`: a piece of input_of(me) picked by peer, so each pair differs.
  auto message = [&](int from, int to) { return input_of(from, {2 * C, 3}, DType::f64, 4).slice0(2 * to, 2 * to + 2); };
  for (int peer = 0; peer < C; ++peer) requests.push_back(group->isend(message(me, peer), peer, me));
  for (Request& r : requests) {
    CHECK(r.valid());
    r.wait();
    CHECK(r.test());  // completed stays completed
  }
  for (int peer = 0; peer < C; ++peer) {
    INFO("from rank " << peer);
    CHECK(mismatch(inbox[static_cast<std::size_t>(peer)], message(peer, me)) == "");
  }
  // C messages each way, the one to itself counted as zero.
  const std::int64_t bytes = static_cast<std::int64_t>(inbox[0].nbytes());
  expect_traffic(*group, {{Primitive::send, {C - 1, (C - 1) * bytes, 0, 0}},
                          {Primitive::recv, {0, 0, C - 1, (C - 1) * bytes}}});
}

TEST_CASE("Request::test is false until the message can have arrived", "[dist][p2p]") {
  auto group = world_group("t.request_test");
  const int me = group->rank();
  Request empty;
  CHECK_FALSE(empty.valid());
  CHECK(empty.test());
  empty.wait();
  if (group->size() < 2) return;
  Tensor received = Tensor::zeros({4}, DType::i32);
  Request pending;
  if (me == 1) {
    pending = group->irecv(received, 0, 5);
    CHECK_FALSE(pending.test());  // rank 0 sends only after the barrier, which needs this rank
  }
  group->barrier();
  if (me == 0) group->isend(Tensor::from_vector(std::vector<std::int32_t>{1, 2, 3, 4}, {4}), 1, 5).wait();
  if (me == 1) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!pending.test() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    CHECK(pending.test());
    CHECK(received.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3, 4});
  }
}

TEST_CASE("a receive that does not match the message's size is an error naming both", "[dist][p2p][errors]") {
  auto group = world_group("t.p2p_size");
  const int me = group->rank();
  if (group->size() < 2) return;
  if (me == 0) {
    group->send(Tensor::ones({10}, DType::f32), 1, 1);
    group->send(Tensor::ones({12}, DType::f32), 1, 2);
  }
  if (me == 1) {
    Tensor larger = Tensor::zeros({12}, DType::f32);
    const std::string shorter = error_of([&] { group->recv(larger, 0, 1); });
    CHECK_THAT(shorter, Catch::Contains("recv on group 't.p2p_size'") &&
                            Catch::Contains("received 40 bytes from rank 0") &&
                            Catch::Contains("receive buffer is f32 [12] (48 bytes)"));
    Tensor smaller = Tensor::zeros({10}, DType::f32);
    const std::string longer = error_of([&] { group->recv(smaller, 0, 2); });
    CHECK_THAT(longer, Catch::Contains("recv on group 't.p2p_size'") &&
                           Catch::Contains("message from rank 0 is larger than the receive buffer f32 [10] (40 bytes)"));
  }
  group->barrier();
}

TEST_CASE("peers outside the group are errors before anything is sent", "[dist][p2p][errors]") {
  auto group = world_group("t.p2p_peer");
  Tensor t = Tensor::zeros({2}, DType::f32);
  CHECK_THAT(error_of([&] { group->send(t, group->size()); }),
             Catch::Contains("send on group 't.p2p_peer'") && Catch::Contains("destination " + std::to_string(group->size()) + " is not a rank"));
  CHECK_THAT(error_of([&] { group->recv(t, -1); }), Catch::Contains("source -1 is not a rank"));
  CHECK_THAT(error_of([&] { group->isend(t, 0, -3).wait(); }), Catch::Contains("tag -3 is outside"));
  CHECK(group->traffic().total() == wf::comm::Traffic{});
}
