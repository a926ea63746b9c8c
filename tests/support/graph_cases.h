#pragma once
// Device graphs (wallfacer/core/graph.h) and train.cuda_graph on any device that records graphs:
// tests/core/graph_test.cpp and tests/train/test_microbatch_graph.cpp run them on the test
// device, tests/cuda/test_graph.cpp on a GPU.
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/core/tensor.h"

namespace wf::parity {

// A capture runs nothing, each replay repeats the recorded work over the same memory, reading
// new inputs copied into the captured ones; a host constant copied in is baked in.
void check_capture_and_replay(Device device);
// Tensors made after a capture never share the graph's memory (nor the memory of a tensor the
// capture read and dropped), and a graph's tensor outlives it.
void check_graph_memory_isolated(Device device);
// A host read, an event on the capture stream, random draws and an error of the work each fail
// the capture with their reason, leaving the device, the random streams and later captures as
// they were; the CPU and default streams are refused.
void check_capture_refusals(Device device);

// A tiny GPT, LLaMA or DiT ("gpt", "llama", "dit") on synthetic data on `device`: 3 steps of 3
// micro batches of 2 sequences (32 tokens; the DiT's 8 x 8 images, 16 patches), with or without
// train.cuda_graph, dropout (the decoders') and train.dtype as given.
config::RunConfig tiny_graph_run(const std::string& model, Device device, bool graph, double dropout,
                                 DType dtype = DType::f32);

struct GraphRun {
  std::vector<double> losses;
  std::vector<Tensor> weights;  // on the host
  std::vector<Tensor> moments;  // AdamW's state, on the host
  std::string failure;          // the capture's, when it failed
  std::int64_t replays = 0;
  std::int64_t host_syncs = 0;  // host waits during the steps (wallfacer/core/stream.h)
};
GraphRun train_tiny(const config::RunConfig& config);

}  // namespace wf::parity
