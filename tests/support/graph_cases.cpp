#include "support/graph_cases.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/graph.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/reduction.h"
#include "wallfacer/train/trainer.h"

namespace wf::parity {
namespace {

using Catch::Contains;

Tensor on(Device device, const std::vector<float>& values) {
  return Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}).to(device);
}

std::vector<float> host_values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

}  // namespace

void check_capture_and_replay(Device device) {
  REQUIRE(graphs_supported(device));
  const Stream stream = Stream::create(device);
  Tensor x = on(device, {1, 2, 3});
  Tensor y;
  synchronize(device);  // x, written on the default stream, before the replays read it
  const std::int64_t syncs = host_sync_count();
  const DeviceGraph graph = DeviceGraph::capture(stream, [&] {
    CHECK(Stream::current(device) == stream);
    const Tensor twice = add(x, x);                           // a temporary of the graph's pool
    y = add(scale(twice, 0.5), on(device, {10, 20, 30}));  // x + a host constant, baked in
  });
  CHECK(host_sync_count() == syncs);
  CHECK(Stream::current(device) == Stream::default_for(device));
  CHECK(graph.pool_bytes() > 0);
  graph.replay();
  synchronize(device);
  CHECK(host_values(y) == std::vector<float>{11, 22, 33});
  x.copy_(on(device, {-1, 0, 5}));  // a new input, into the captured one (default stream)
  synchronize(device);
  graph.replay();
  synchronize(device);
  CHECK(host_values(y) == std::vector<float>{9, 20, 35});
  CHECK(graph.replays() == 2);
}

void check_graph_memory_isolated(Device device) {
  const Stream stream = Stream::create(device);
  const Tensor x = on(device, {1, 2, 3, 4});
  synchronize(device);
  Tensor out;
  const DeviceGraph graph = DeviceGraph::capture(stream, [&] {
    Tensor scratch = scale(x, 3.0);  // freed inside the capture: its block goes back to the pool
    scratch = Tensor();
    out = scale(x, 2.0);  // and is reused here
  });
  // Freed blocks are reused first (the test device's arena: first fit): were the pool's blocks
  // back with the allocator, these would land on them and the replay would overwrite them.
  std::vector<Tensor> outside;
  for (int i = 0; i < 8; ++i) outside.push_back(Tensor::full({4}, 7.0, DType::f32, device));
  synchronize(device);  // the replays read x, which the default stream wrote
  graph.replay();
  synchronize(device);
  for (const Tensor& t : outside) CHECK(host_values(t) == std::vector<float>{7, 7, 7, 7});
  CHECK(host_values(out) == std::vector<float>{2, 4, 6, 8});
  // An input dropped inside the capture stays the graph's: its replays still read it.
  Tensor input = on(device, {5, 6, 7, 8});
  Tensor from_input;
  const DeviceGraph keeps = DeviceGraph::capture(stream, [&] {
    from_input = scale(input, 1.0);
    input = Tensor();
  });
  for (int i = 0; i < 8; ++i) outside.push_back(Tensor::full({4}, 9.0, DType::f32, device));
  synchronize(device);
  keeps.replay();
  synchronize(device);
  CHECK(host_values(from_input) == std::vector<float>{5, 6, 7, 8});
  // A graph's tensor outlives the graph: the pool is freed with the last of them.
  DeviceGraph dropped = DeviceGraph::capture(stream, [&] { out = scale(x, -1.0); });
  dropped.replay();
  dropped = DeviceGraph();
  CHECK(host_values(out) == std::vector<float>{-1, -2, -3, -4});
}

void check_capture_refusals(Device device) {
  const Stream stream = Stream::create(device);
  const Tensor x = on(device, {1, 2});
  synchronize(device);
  const std::string name = device.str();
  CHECK_THROWS_WITH(DeviceGraph::capture(stream, [&] { (void)sum(x).to(Device::cpu()); }),
                    Contains("waits for " + name + " on the host"));
  CHECK_THROWS_WITH(DeviceGraph::capture(stream, [&] { Event().record(stream); }),
                    Contains("records an event on the capture stream"));
  const Generator::State before = default_generator().state();
  CHECK_THROWS_WITH(DeviceGraph::capture(stream, [&] { (void)Tensor::randn({4}).to(device); }),
                    Contains("draws random numbers"));
  CHECK(default_generator().offset() == before.offset);
  CHECK_THROWS_WITH(DeviceGraph::capture(stream, [&] { (void)add(x, on(device, {1, 2, 3})); }),
                    Contains("capturing on " + name + " failed"));
  CHECK_THROWS_AS(DeviceGraph::capture(Stream::create(Device::cpu()), [] {}), GraphCaptureError);
  CHECK_THROWS_WITH(DeviceGraph::capture(Stream::default_for(device), [] {}),
                    Contains("default stream cannot be captured"));
  CHECK_FALSE(graphs_supported(Device::cpu()));
  CHECK_THROWS_WITH(DeviceGraph().replay(), Contains("the graph is empty"));
  // The failed captures left the stream running work eagerly, and a new capture works.
  CHECK(host_values(scale(x, 4.0)) == std::vector<float>{4, 8});
  Tensor y;
  const DeviceGraph graph = DeviceGraph::capture(stream, [&] { y = scale(x, 5.0); });
  graph.replay();
  synchronize(device);
  CHECK(host_values(y) == std::vector<float>{5, 10});
}

config::RunConfig tiny_graph_run(const std::string& model, Device device, bool graph, double dropout, DType dtype) {
  config::RunConfig c;
  c.model.set_name(model);
  c.model.set("n_layer", 2);
  c.model.set("n_head", 4);
  c.model.set("d_model", 32);
  if (model == "dit") {
    // 8 x 8 images in 2 x 2 patches: 16 tokens. Its noise, timesteps and class dropout are drawn
    // by its batch source, on the host: batch tensors, copied into the graph's inputs.
    c.model.set("image_size", 8);
    c.model.set("patch_size", 2);
    c.model.set("num_classes", 10);
    c.model.set("class_dropout", 0.1);
    c.model.set("learn_sigma", true);
    c.model.set("diffusion", std::string_view("ddpm"));
    c.train.seq_len = 16;
  } else {
    c.model.set("n_kv_head", model == "llama" ? 2 : 4);
    c.model.set("d_ff", 64);
    c.model.set("vocab_size", 256);
    c.model.set("max_seq_len", 32);
    if (dropout > 0) c.model.set("dropout", dropout);
    c.train.seq_len = 32;
  }
  c.train.micro_batch_size = 2;
  c.train.global_batch_size = 6;  // 3 micro batches a step: the second is captured, the rest replayed
  c.train.steps = 3;
  c.train.warmup_steps = 1;
  c.train.device = device;
  c.train.dtype = dtype;
  c.train.cuda_graph = graph;
  c.data.source = config::DataSource::synthetic;
  c.checkpoint.dir = (std::filesystem::temp_directory_path() / ("wf-graph-" + std::to_string(getpid()))).string();
  c.log.dir = c.checkpoint.dir;
  return c;
}

GraphRun train_tiny(const config::RunConfig& config) {
  auto& runtime = comm::Runtime::init();
  comm::CommGrid grid(comm::ProcessGrid(config.parallel.grid(), runtime.world_size(), runtime.rank()));
  train::Trainer trainer(config, grid);
  GraphRun run;
  const std::int64_t syncs = host_sync_count();
  for (int step = 0; step < config.train.steps; ++step) run.losses.push_back(trainer.train_step().loss);
  run.host_syncs = host_sync_count() - syncs;
  for (const Tensor& p : trainer.model().parameters()) run.weights.push_back(p.to(Device::cpu()));
  for (const auto& [key, value] : trainer.optimizer().state_dict()) run.moments.push_back(value.to(Device::cpu()));
  if (const train::MicrobatchGraph* graph = trainer.microbatch_graph()) {
    run.failure = graph->failure();
    run.replays = graph->replays();
  }
  return run;
}

}  // namespace wf::parity
