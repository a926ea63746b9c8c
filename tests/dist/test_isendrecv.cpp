// Group::isendrecv: the non-blocking sendrecv of a ring step. Data around a ring for every
// dtype and sizes past the eager limit, traffic counted like sendrecv, self-exchanges counted
// as zero, a send buffer that is also the receive buffer, several exchanges in flight at
// once, and bad peers refused before anything is posted.
#include <fmt/format.h>

#include "dist_testing.h"

using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Primitive;
using wf::comm::Request;
using namespace wf::test;

TEST_CASE("isendrecv around a ring delivers the data and counts one send and one receive", "[dist][p2p][isendrecv]") {
  auto group = world_group("t.isendrecv");
  const int C = group->size(), me = group->rank();
  const int next = (me + 1) % C, prev = (me + C - 1) % C;
  for (DType dtype : kDtypes) {
    for (std::int64_t rows : {0, 3, 2000}) {  // 2000·4·8 bytes: past the eager limit
      const Shape shape{rows, 4};
      INFO(fmt::format("{} {}", wf::dtype_name(dtype), wf::shape_str(shape)));
      Tensor received = Tensor::zeros(shape, dtype);
      Request request = group->isendrecv(input_of(me, shape, dtype, 11), next, received, prev, 7);
      CHECK(request.valid());
      request.wait();
      CHECK(request.test());  // completed stays completed
      CHECK(mismatch(received, input_of(prev, shape, dtype, 11)) == "");
      const std::int64_t bytes = C > 1 ? static_cast<std::int64_t>(received.nbytes()) : 0;
      expect_traffic(*group, {{Primitive::send, one_call(bytes, 0)}, {Primitive::recv, one_call(0, bytes)}});
    }
  }
}

TEST_CASE("isendrecv to this rank itself moves the data and counts nothing", "[dist][p2p][isendrecv]") {
  auto group = world_group("t.isendrecv_self");
  const int me = group->rank();
  const Shape shape{5, 3};
  Tensor back = Tensor::zeros(shape, DType::f64);
  group->isendrecv(input_of(me, shape, DType::f64, 12), me, back, me, 1).wait();
  CHECK(mismatch(back, input_of(me, shape, DType::f64, 12)) == "");
  CHECK(group->traffic().total() == wf::comm::Traffic{});
}

TEST_CASE("isendrecv may send the buffer it receives into", "[dist][p2p][isendrecv]") {
  // A ring rotation in place: the outgoing data is copied before the incoming lands.
  auto group = world_group("t.isendrecv_in_place");
  const int C = group->size(), me = group->rank();
  const Shape shape{300, 8};
  Tensor buffer = input_of(me, shape, DType::f32, 13);
  group->isendrecv(buffer, (me + 1) % C, buffer, (me + C - 1) % C, 2).wait();
  CHECK(mismatch(buffer, input_of((me + C - 1) % C, shape, DType::f32, 13)) == "");
}

TEST_CASE("several isendrecv in flight complete in any order", "[dist][p2p][isendrecv]") {
  // Ring attention keeps the K and V exchanges of a step in flight together; here four
  // exchanges to different distances, each with its own tag, completed newest first.
  auto group = world_group("t.isendrecv_many");
  const int C = group->size(), me = group->rank();
  const Shape shape{1000, 6};
  constexpr int kExchanges = 4;
  std::vector<Tensor> inbox;
  std::vector<Request> requests;
  for (int k = 0; k < kExchanges; ++k) inbox.push_back(Tensor::zeros(shape, DType::f32));
  for (int k = 0; k < kExchanges; ++k) {
    const int distance = 1 + k % std::max(1, C - 1);
    requests.push_back(group->isendrecv(input_of(me, shape, DType::f32, 20 + k), (me + distance) % C,
                                        inbox[static_cast<std::size_t>(k)], (me + C - distance % C) % C, 30 + k));
  }
  for (int k = kExchanges - 1; k >= 0; --k) requests[static_cast<std::size_t>(k)].wait();
  for (int k = 0; k < kExchanges; ++k) {
    const int distance = 1 + k % std::max(1, C - 1);
    INFO("exchange " << k << " over distance " << distance);
    CHECK(mismatch(inbox[static_cast<std::size_t>(k)], input_of((me + C - distance % C) % C, shape, DType::f32, 20 + k)) ==
          "");
  }
}

TEST_CASE("isendrecv refuses peers outside the group before posting anything", "[dist][p2p][isendrecv][errors]") {
  auto group = world_group("t.isendrecv_errors");
  const int C = group->size();
  Tensor send = Tensor::ones({2}, DType::f32), recv = Tensor::zeros({2}, DType::f32);
  CHECK_THAT(error_of([&] { group->isendrecv(send, C, recv, 0).wait(); }),
             Catch::Contains("isendrecv on group 't.isendrecv_errors'") &&
                 Catch::Contains(fmt::format("destination {} is not a rank", C)));
  CHECK_THAT(error_of([&] { group->isendrecv(send, 0, recv, -1).wait(); }), Catch::Contains("source -1 is not a rank"));
  CHECK_THAT(error_of([&] { group->isendrecv(send, 0, recv, 0, -2).wait(); }), Catch::Contains("tag -2 is outside"));
  Tensor undefined;
  CHECK_THAT(error_of([&] { group->isendrecv(send, 0, undefined, 0).wait(); }),
             Catch::Contains("the output tensor is undefined"));
  CHECK(group->traffic().total() == wf::comm::Traffic{});
  group->barrier();  // nothing was posted: the group still works
}
