// train.cuda_graph on the test device, whose graphs record each stream's queued kernels and
// replay them (src/core/test_device_streams.h): a run that captures its micro batches once and
// replays them trains exactly as one that runs them eagerly, bit for bit (losses, weights, AdamW's
// moments), for GPT, LLaMA and DiT in f32 and bf16, with gradient accumulation and with asynchronous
// streams. A model whose step draws random numbers (dropout) cannot be replayed: the capture
// fails, says why, and the run continues without a graph, still bit for bit the eager run.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "support/async_streams.h"
#include "support/graph_cases.h"
#include "wallfacer/config/run_config.h"

namespace {

using wf::Device;
using wf::Tensor;
using wf::parity::GraphRun;
using wf::parity::tiny_graph_run;
using wf::parity::train_tiny;

GraphRun train(const std::string& model, bool graph, double dropout, wf::DType dtype = wf::DType::f32) {
  return train_tiny(tiny_graph_run(model, Device::test(), graph, dropout, dtype));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void require_same(const GraphRun& graph, const GraphRun& eager) {
  REQUIRE(graph.losses == eager.losses);  // exactly
  REQUIRE(graph.weights.size() == eager.weights.size());
  for (std::size_t i = 0; i < eager.weights.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(graph.weights[i], eager.weights[i]));
  }
  REQUIRE(graph.moments.size() == eager.moments.size());
  for (std::size_t i = 0; i < eager.moments.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(graph.moments[i], eager.moments[i]));
  }
}

}  // namespace

TEST_CASE("a step captured once and replayed trains bit for bit as the eager step", "[train][graph][testdev]") {
  // Every model in f32 and bf16 (weights cast from the masters at each use, in the graph);
  // asynchronous streams (the stream order of the capture, replay and frees) with one of them.
  const auto [model, async, dtype] = GENERATE(table<std::string, bool, wf::DType>({
      {"gpt", false, wf::DType::f32},
      {"gpt", false, wf::DType::bf16},
      {"gpt", true, wf::DType::f32},
      {"llama", false, wf::DType::f32},
      {"llama", false, wf::DType::bf16},
      {"llama", true, wf::DType::bf16},
      {"dit", false, wf::DType::f32},
      {"dit", false, wf::DType::bf16},
      {"dit", true, wf::DType::f32},
  }));
  CAPTURE(model, async, wf::dtype_name(dtype));
  const wf::parity::AsyncStreams streams(async, 30);
  const GraphRun eager = train(model, false, 0.0, dtype);
  const GraphRun graph = train(model, true, 0.0, dtype);
  CHECK(graph.failure.empty());
  // 3 steps x 3 micro batches: the first ran eagerly, every later one replayed the graph.
  CHECK(graph.replays == 8);
  CHECK(graph.host_syncs == eager.host_syncs);  // capturing and replaying wait for nothing more
  require_same(graph, eager);
}

TEST_CASE("a step that draws random numbers is not replayed: the capture fails with the reason and the run goes on "
          "eagerly",
          "[train][graph][testdev]") {
  const GraphRun eager = train("gpt", false, 0.1);
  const GraphRun graph = train("gpt", true, 0.1);
  CHECK(graph.replays == 0);
  CHECK_THAT(graph.failure, Catch::Contains("draws random numbers"));
  require_same(graph, eager);  // the failed capture left the random streams where they were
}

TEST_CASE("validate refuses train.cuda_graph where a graph cannot serve the run", "[train][graph][config]") {
  const auto problems_of = [](const wf::config::RunConfig& c) {
    std::string all;
    for (const std::string& p : wf::config::unsupported_by_trainer(c)) all += p + "\n";
    return all;
  };
  wf::config::RunConfig c = tiny_graph_run("gpt", Device::test(), true, 0.0);
  CHECK(problems_of(c).empty());
  c.train.device = Device::cpu();
  CHECK_THAT(problems_of(c), Catch::Contains("train.device is cpu, which runs no graphs"));
  c = tiny_graph_run("gpt", Device::test(), true, 0.0);
  c.parallel.dp = 2;
  CHECK_THAT(problems_of(c), Catch::Contains("a graph captures one process's step"));
  c = tiny_graph_run("gpt", Device::test(), true, 0.0);
  c.data.pack = true;
  CHECK_THAT(problems_of(c), Catch::Contains("data.pack is true"));
}
