// train.cuda_graph on the test device, whose graphs record each stream's queued kernels and
// replay them (src/core/test_device_streams.h): a run that captures its micro batches once and
// replays them trains exactly as one that runs them eagerly, bit for bit (losses, weights, AdamW's
// moments), for GPT, LLaMA and DiT in f32 and bf16, with gradient accumulation and with asynchronous
// streams. A model whose step draws random numbers (dropout) cannot be replayed: the capture
// fails, says why, and the run continues without a graph, still bit for bit the eager run.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "support/async_streams.h"
#include "support/graph_cases.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/train/microbatch_graph.h"
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

TEST_CASE("MicrobatchGraph: the first micro batch runs eagerly, the second is captured, later ones replay; batches "
          "of other shapes or with packed documents run eagerly",
          "[train][graph][testdev]") {
  // A micro batch's "step": the loss sum of 2·x, its count the element count.
  const auto step = [](const wf::models::Batch& batch) {
    const Tensor& x = batch.at("x");
    return wf::models::LossSum(wf::sum(wf::scale(x, 2.0)), Tensor::full({}, double(x.numel()), wf::DType::i64, x.device()));
  };
  const auto batch_of = [](std::vector<float> values) {
    wf::models::Batch b;
    const auto n = static_cast<std::int64_t>(values.size());
    b.set("x", Tensor::from_vector(values, {n}).to(Device::test()));
    return b;
  };
  const auto loss_of = [](const wf::models::LossSum& loss) { return loss.sum.to(Device::cpu()).item(); };
  wf::train::MicrobatchGraph graph(Device::test());
  CHECK(loss_of(graph.run(batch_of({1, 2}), step)) == 6.0);  // eager
  CHECK_FALSE(graph.replaying());
  CHECK(loss_of(graph.run(batch_of({3, 4}), step)) == 14.0);  // captured, then replayed
  CHECK(graph.replaying());
  CHECK(loss_of(graph.run(batch_of({5, 6}), step)) == 22.0);  // replayed on new inputs
  CHECK(graph.replays() == 2);
  CHECK(loss_of(graph.run(batch_of({1, 1, 1}), step)) == 6.0);  // another shape: eagerly
  CHECK(graph.eager_runs() == 2);
  CHECK(graph.replays() == 2);

  wf::train::MicrobatchGraph packed(Device::test());
  wf::models::Batch documents = batch_of({1, 2});
  documents.set_documents({{0, 1, 2}});
  (void)packed.run(documents, step);
  CHECK(loss_of(packed.run(documents, step)) == 6.0);
  CHECK_FALSE(packed.replaying());
  CHECK_THAT(packed.failure(), Catch::Contains("packed documents"));
}
