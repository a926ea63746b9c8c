// CUDA graphs (wallfacer/core/graph.h) on the GPU: the cases the test device runs
// (tests/support/graph_cases.h), then train.cuda_graph against the eager step. The same kernels run
// in both, over other addresses; kernels that accumulate with atomics (the embedding's backward)
// may order their sums differently run to run, so the comparison allows f32 rounding: losses
// within 1e-6 relative; weights (of size ~0.1) within 1e-5 absolute and AdamW's moments within 1e-5
// relative (3 steps: rounding differences of the gradients move them by less).
#include <catch2/catch.hpp>

#include <string>

#include "support/graph_cases.h"
#include "tests/cuda/cuda_test_util.h"

using wf::Device;
using wf::cuda_test::gpu;

TEST_CASE("cuda: a captured graph replays its kernels over its own memory", "[cuda][graph]") {
  wf::parity::check_capture_and_replay(gpu());
  wf::parity::check_graph_memory_isolated(gpu());
}

TEST_CASE("cuda: what a graph cannot hold fails the capture with its reason", "[cuda][graph]") {
  wf::parity::check_capture_refusals(gpu());
}

TEST_CASE("cuda: train.cuda_graph trains as the eager step", "[cuda][graph][train]") {
  const std::string model = GENERATE(as<std::string>{}, "gpt", "llama", "dit");
  CAPTURE(model);
  const wf::parity::GraphRun eager = wf::parity::train_tiny(wf::parity::tiny_graph_run(model, gpu(), false, 0.0));
  const wf::parity::GraphRun graph = wf::parity::train_tiny(wf::parity::tiny_graph_run(model, gpu(), true, 0.0));
  CHECK(graph.failure.empty());
  CHECK(graph.replays == 8);
  REQUIRE(graph.losses.size() == eager.losses.size());
  for (std::size_t i = 0; i < eager.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(graph.losses[i] == Approx(eager.losses[i]).epsilon(1e-6));
  }
  REQUIRE(graph.weights.size() == eager.weights.size());
  for (std::size_t i = 0; i < eager.weights.size(); ++i) {
    wf::cuda_test::require_close(graph.weights[i], eager.weights[i], 0, 1e-5, "weight " + std::to_string(i));
  }
  REQUIRE(graph.moments.size() == eager.moments.size());
  for (std::size_t i = 0; i < eager.moments.size(); ++i) {
    wf::cuda_test::require_close(graph.moments[i], eager.moments[i], 1e-5, 1e-12, "moment " + std::to_string(i));
  }
}
