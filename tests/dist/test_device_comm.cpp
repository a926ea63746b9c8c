// Communication of test-device tensors: MPI stages them through host memory (mpi_backend.cpp),
// so every collective and point-to-point call gives the bytes the same call gives on CPU tensors;
// a send sees work still queued on the device's stream; and a comm::Request's completion is an
// event that orders a consumer stream after the received values (the test device's streams run
// as queues with random delays here, so a missing order would show as wrong values).
#include "dist_testing.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/ops/arithmetic.h"

using wf::Device;
using wf::DType;
using wf::Shape;
using wf::Tensor;
using wf::comm::Request;
using namespace wf::test;

TEST_CASE("collectives and point-to-point on test-device tensors give the CPU's bytes", "[dist][testdev]") {
  const AsyncTestDevice async(100);
  auto group = world_group("t.device_comm");
  const int P = group->size(), me = group->rank();
  for (const DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    INFO(wf::dtype_name(dtype));
    const Shape shape{static_cast<std::int64_t>(P) * 3, 5};
    const Tensor x = input_of(me, shape, dtype, 7);

    Tensor cpu = x.clone(), dev = x.to(Device::test());
    group->all_reduce(cpu);
    group->all_reduce(dev);
    CHECK(same_bytes(dev, cpu));

    cpu = x.clone();
    dev = x.to(Device::test());
    Request cpu_request = group->iall_reduce(cpu), dev_request = group->iall_reduce(dev);
    cpu_request.wait();
    dev_request.wait();
    CHECK(same_bytes(dev, cpu));

    CHECK(same_bytes(group->all_gather(x.to(Device::test())), group->all_gather(x)));
    if (dtype != DType::i64) {
      CHECK(same_bytes(group->reduce_scatter(x.to(Device::test())), group->reduce_scatter(x)));
    }
    CHECK(same_bytes(group->all_to_all(x.to(Device::test())), group->all_to_all(x)));

    cpu = x.clone();
    dev = x.to(Device::test());
    group->broadcast(cpu, P - 1);
    group->broadcast(dev, P - 1);
    CHECK(same_bytes(dev, cpu));

    // A ring: each rank sends to the next and receives from the previous.
    const int next = (me + 1) % P, previous = (me + P - 1) % P;
    Tensor received = Tensor::zeros(shape, dtype, Device::test());
    group->isendrecv(x.to(Device::test()), next, received, previous, 11).wait();
    CHECK(same_bytes(received, input_of(previous, shape, dtype, 7)));
  }
}

TEST_CASE("a send of a test-device tensor sees the work queued on its stream", "[dist][testdev]") {
  const AsyncTestDevice async(0);
  auto group = world_group("t.device_send_order");
  const int P = group->size(), me = group->rank();
  const int next = (me + 1) % P, previous = (me + P - 1) % P;
  Tensor x = Tensor::empty({1000}, DType::f32, Device::test());
  // The fill is still queued (the stream stalls) when the send is posted: the staging copy must
  // wait for it.
  wf::detail::test_stream_stall(wf::Stream::current(Device::test()), 100);
  x.fill_(static_cast<double>(me + 1));
  Tensor received = Tensor::zeros({1000}, DType::f32, Device::test());
  Request recv = group->irecv(received, previous, 12);
  Request send = group->isend(x, next, 12);
  send.wait();
  recv.wait();
  CHECK(same_bytes(received, Tensor::full({1000}, static_cast<double>(previous + 1), DType::f32)));
}

TEST_CASE("a comm::Request records an event that a stream waits on", "[dist][testdev]") {
  const AsyncTestDevice async(200);
  auto group = world_group("t.device_request_event");
  const int P = group->size(), me = group->rank();
  const int next = (me + 1) % P, previous = (me + P - 1) % P;
  const wf::Stream consumer = wf::Stream::create(Device::test());
  for (int round = 0; round < 3; ++round) {
    const Shape shape{64, 9};
    Tensor received = Tensor::empty(shape, DType::f32, Device::test());  // NaN until written
    Request request = group->irecv(received, previous, 20 + round);
    group->isend(input_of(me, shape, DType::f32, round).to(Device::test()), next, 20 + round).wait();
    // The consumer's work is ordered after the request's completion (the copy back into the
    // device tensor included) by the event, not by a host wait on the consumer.
    request.make_wait(consumer);
    Tensor doubled;
    {
      const wf::StreamGuard on(consumer);
      doubled = wf::add(received, received);
    }
    const wf::Event done = request.record_event(consumer);  // completed already: records again, harmlessly
    consumer.wait(done);
    Tensor host;
    {
      const wf::StreamGuard on(consumer);
      host = doubled.to(Device::cpu());
    }
    const Tensor expected = input_of(previous, shape, DType::f32, round);
    CHECK(same_bytes(host, wf::add(expected, expected)));
  }
  // An empty request's event is complete: waiting on it orders nothing.
  Request none;
  CHECK_FALSE(none.record_event(consumer).recorded());
}
