// Device graphs (wallfacer/core/graph.h) on the test device, which records what a capture queues
// and replays it (src/core/test_device_streams.h), with inline and asynchronous streams: the
// cases of tests/support/graph_cases.h (tests/cuda/test_graph.cpp runs them on a GPU), and the
// one refusal only the test device can see (a GPU runs work queued on another stream eagerly).
#include <catch2/catch.hpp>

#include "support/async_streams.h"
#include "support/graph_cases.h"
#include "wallfacer/core/graph.h"
#include "wallfacer/ops/arithmetic.h"

using wf::Device;

TEST_CASE("a captured graph runs nothing until replayed, and each replay reads its inputs anew", "[core][graph]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const wf::parity::AsyncStreams streams(async, 30);
  wf::parity::check_capture_and_replay(Device::test());
  wf::parity::check_graph_memory_isolated(Device::test());
}

TEST_CASE("what a graph cannot hold fails the capture with its reason, and leaves nothing behind", "[core][graph]") {
  wf::parity::check_capture_refusals(Device::test());
  const wf::Stream stream = wf::Stream::create(Device::test()), other = wf::Stream::create(Device::test());
  const wf::Tensor x = wf::Tensor::ones({2}, wf::DType::f32, Device::test());
  CHECK_THROWS_WITH(wf::DeviceGraph::capture(stream,
                                             [&] {
                                               const wf::StreamGuard guard(other);
                                               (void)wf::scale(x, 2.0);
                                             }),
                    Catch::Contains("queued work on testdev:0's stream"));
}
