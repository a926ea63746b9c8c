// measure_layout and its helpers: layout_measure.h.
#include "src/cli/layout_measure.h"

#include <chrono>
#include <map>
#include <thread>

#include "src/core/timing.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/core/machine.h"
#include "wallfacer/core/storage.h"
#include "wallfacer/models/decoder.h"
#include "wallfacer/models/dit.h"
#include "wallfacer/models/model.h"
#include "wallfacer/train/pipeline_runner.h"
#include "wallfacer/train/step_traffic.h"
#include "wallfacer/train/trainer.h"

namespace wf::cli {

config::RunConfig measurement_config(config::RunConfig c, int steps) {
  c.data.source = config::DataSource::synthetic;
  // Synthetic tokens have no documents, so a packed config is measured unpacked: the traffic
  // train/step_traffic.h predicts, which a packed run's steps never exceed (they skip ring steps,
  // docs/sequence-parallelism.md §13).
  c.data.pack = false;
  c.train.steps = 1 + steps;
  c.train.eval_every = 0;
  return c;
}

double job_machine_memory_bytes() {
  Tensor machine = Tensor::full({1}, static_cast<double>(machine_memory_bytes()), DType::f64);
  comm::Runtime::get().world().all_reduce(machine, comm::ReduceOp::min);
  return machine.item();
}

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t tensor_bytes(const std::vector<Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
  return bytes;
}

// AdamW's per-parameter tensors: the moments, and the EMA when kept (the step counts are scalars).
std::int64_t optimizer_state_bytes(const train::AdamW& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& [key, tensor] : optimizer.state_dict()) {
    if (!key.ends_with(".step")) bytes += static_cast<std::int64_t>(tensor.nbytes());
  }
  return bytes;
}

// The allocator's peak during one microbatch's forward (no backward) above what was live before
// it, on the trainer's first microbatch (tokens, or DiT's images and draws).
std::int64_t forward_activation_bytes(models::Model& model, const config::RunConfig& config,
                                      const models::BatchSource& batches) {
  const models::Batch batch = batches.get(0, 0);
  reset_peak_memory();
  const std::int64_t live_before = memory_stats().live_bytes;
  if (config.parallel.pp == 1) {
    const models::LossSum loss = model.loss_sum(batch);  // the graph goes with it
  } else {
    // A pipeline stage: the microbatch through each of this rank's chunks, as PipelineRunner's
    // forwards run them (a received input is a fresh leaf that requires grad), every chunk's
    // graph kept until the end, as one microbatch in flight holds them.
    const models::StageRange stage = model.stage();
    std::vector<Tensor> kept;
    for (int chunk = 0; chunk < stage.num_chunks(); ++chunk) {
      Tensor input;
      if (!(stage.embedding && chunk == 0)) {
        const auto [shape, dtype] = model.stage_hidden(batch);
        input = Tensor::zeros(shape, dtype);
        input.set_requires_grad(true);
      }
      models::StageOutput out = model.forward_stage(batch, input, chunk);
      kept.push_back(input);
      kept.push_back(out.hidden.defined() ? out.hidden : out.loss.sum);
    }
  }
  return memory_stats().peak_bytes - live_before;
}

// The cores of the job's machines: each node's first rank counts its own.
int job_cores(comm::Runtime& runtime) {
  const double cores = runtime.local_rank() == 0 ? double(std::max(1U, std::thread::hardware_concurrency())) : 0.0;
  Tensor t = Tensor::from_vector(std::vector<double>{cores}, {1});
  runtime.world().all_reduce(t);
  return static_cast<int>(t.to_vector<double>()[0]);
}

// The group names a row can have: the grid's, then "other" for anything else the registry counts.
std::vector<std::string> group_names() {
  std::vector<std::string> names(comm::ProcessGrid::group_names().begin(), comm::ProcessGrid::group_names().end());
  names.emplace_back("other");
  return names;
}

// Bytes sent since `before`, by group_names().
std::vector<std::int64_t> sent_since(const std::map<std::string, comm::Traffic>& before) {
  const std::vector<std::string> names = group_names();
  std::vector<std::int64_t> sent(names.size(), 0);
  for (const auto& [group, traffic] : comm::TrafficRegistry::instance().snapshot()) {
    const auto was = before.find(group);
    const std::int64_t delta = traffic.bytes_sent - (was == before.end() ? 0 : was->second.bytes_sent);
    const auto at = std::find(names.begin(), names.end() - 1, group) - names.begin();
    sent[static_cast<std::size_t>(at)] += delta;  // not a grid group: "other", the last
  }
  return sent;
}

// This rank's predicted bytes per step by group_names(): train/step_traffic.h for a decoder (the
// registry's gpt and llama) and for DiT, nothing for another model; "other" groups are never used.
std::vector<std::optional<std::int64_t>> predictions(const models::Model& model, const config::RunConfig& config,
                                                     const comm::ProcessGrid& grid) {
  const std::vector<std::string> names = group_names();
  std::vector<std::optional<std::int64_t>> out(names.size());
  std::optional<train::TrafficShape> shape;
  if (const auto* decoder = dynamic_cast<const models::DecoderLM*>(&model)) shape = train::TrafficShape{decoder->options()};
  if (const auto* dit = dynamic_cast<const models::Dit*>(&model)) {
    shape = train::TrafficShape{models::dit_block_shape(dit->options()), /*vocabulary=*/false, /*extra_hidden_rows=*/1};
  }
  if (!shape) return out;
  const train::GroupBytes predicted = train::predicted_step_traffic(config, *shape, grid, model);
  for (std::size_t g = 0; g < names.size(); ++g) {
    const auto p = predicted.find(names[g]);
    out[g] = p != predicted.end() ? p->second : std::optional<std::int64_t>(0);
  }
  return out;
}

std::vector<double> max_over(comm::Group& group, std::vector<double> values) {
  Tensor t = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  group.all_reduce(t, comm::ReduceOp::max);
  return t.to_vector<double>();
}

std::vector<std::int64_t> sum_over(comm::Group& group, std::vector<std::int64_t> values) {
  Tensor t = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  group.all_reduce(t);
  return t.to_vector<std::int64_t>();
}

}  // namespace

LayoutMeasurement measure_layout(const config::RunConfig& config, int steps) {
  comm::Runtime& runtime = comm::Runtime::get();
  comm::Group& world = runtime.world();
  comm::CommGrid grid(comm::ProcessGrid(config.parallel.grid(), runtime.world_size(), runtime.rank()));
  train::Trainer trainer(config, grid);
  const std::vector<Tensor> params = trainer.model().parameters();
  trainer.train_step();  // warm-up: the reducer learns its hook counts, AdamW allocates its moments

  const std::vector<std::string> names = group_names();
  std::vector<std::int64_t> sent(names.size(), 0);
  std::vector<double> step_seconds;
  std::int64_t step_peak = 0;
  const train::PipelineRunner* pipeline = trainer.pipeline();
  double waited = 0, computed = 0;  // this rank's pipeline waits and compute over the measured steps
  for (int step = 0; step < steps; ++step) {
    world.barrier();
    const auto before = comm::TrafficRegistry::instance().snapshot();
    reset_peak_memory();
    const std::int64_t live_before = memory_stats().live_bytes;
    const Clock::time_point start = Clock::now();
    trainer.apply_gradients(trainer.compute_gradients());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    step_peak = std::max(step_peak, memory_stats().peak_bytes - live_before);
    if (pipeline != nullptr) {
      waited += pipeline->wait_seconds();
      computed += pipeline->step_seconds() - pipeline->wait_seconds();
    }
    const std::vector<std::int64_t> delta = sent_since(before);  // before the max below counts on world
    for (std::size_t g = 0; g < names.size(); ++g) sent[g] += delta[g];
    step_seconds.push_back(max_over(world, {seconds})[0]);
  }

  LayoutMeasurement r;
  r.layout = config.parallel;
  r.buckets = trainer.gradients().last_stats();
  r.tokens_per_step = trainer.tokens_per_step();
  r.flops_per_token = trainer.model().train_flops_per_token(config.train.seq_len);
  r.step_seconds = median(step_seconds);
  const double activations = double(forward_activation_bytes(trainer.model(), config, trainer.batches()));
  // The gradients as ReplicaGradients holds them, not the parameters' grad(): ZeRO-2 frees those
  // once they are staged (the sum would read 0), and the flat buffer, the shard and the staging
  // pool (its high-water mark over the steps so far) are what the rank keeps.
  const double grads = double(trainer.gradients().gradient_bytes());
  const std::vector<double> memory =
      max_over(world, {double(tensor_bytes(params)), grads, double(optimizer_state_bytes(trainer.optimizer())),
                       activations, double(step_peak), double(trainer.gradients().persistent_gradient_bytes())});
  r.persistent_gradient_bytes = static_cast<std::int64_t>(memory[5]);
  r.parameter_bytes = static_cast<std::int64_t>(memory[0]);
  r.gradient_bytes = static_cast<std::int64_t>(memory[1]);
  r.optimizer_bytes = static_cast<std::int64_t>(memory[2]);
  r.activation_bytes = static_cast<std::int64_t>(memory[3]);
  r.step_peak_bytes = static_cast<std::int64_t>(memory[4]);
  r.microbatches = config::grad_accum_steps(config);
  if (pipeline != nullptr) {
    const int pp = config.parallel.pp, stage = grid.grid().coord("pp");
    r.ideal_bubble = pipeline->schedule().ideal_bubble();
    // Per stage, the max over its ranks: each rank fills its stage's slots, the others are 0.
    std::vector<double> mine(2 * static_cast<std::size_t>(pp), 0.0);
    mine[static_cast<std::size_t>(stage)] = double(step_peak);
    mine[static_cast<std::size_t>(pp + stage)] = activations;
    const std::vector<double> per_stage = max_over(world, mine);
    // The bubble as metrics.jsonl's pp_bubble: waits and compute summed over the ranks.
    Tensor totals = Tensor::from_vector(std::vector<double>{waited, computed}, {2});
    world.all_reduce(totals);
    const std::vector<double> waits = totals.to_vector<double>();
    for (int s = 0; s < pp; ++s) {
      r.stage_step_peak_bytes.push_back(static_cast<std::int64_t>(per_stage[static_cast<std::size_t>(s)]));
      r.stage_microbatch_bytes.push_back(static_cast<std::int64_t>(per_stage[static_cast<std::size_t>(pp + s)]));
    }
    r.bubble = waits[1] > 0 ? waits[0] / waits[1] : 0.0;
    r.cores = job_cores(runtime);
    r.threads = runtime.threads();
  }

  // Per group: [measured, predicted, 1 if they differ] on this rank, then summed over ranks.
  // Whether a prediction exists depends on the config only, so it is the same on every rank.
  const std::vector<std::optional<std::int64_t>> predicted = predictions(trainer.model(), config, grid.grid());
  std::vector<std::int64_t> mine;
  for (std::size_t g = 0; g < names.size(); ++g) {
    const std::int64_t expected = predicted[g].value_or(0) * steps;
    mine.insert(mine.end(), {sent[g], expected, predicted[g] && sent[g] != expected ? 1 : 0});
  }
  const std::vector<std::int64_t> totals = sum_over(world, mine);
  for (std::size_t g = 0; g < names.size(); ++g) {
    const std::int64_t measured = totals[3 * g] / steps, expected = totals[3 * g + 1] / steps;
    if (measured == 0 && expected == 0) continue;  // a group the step does not use
    r.groups.push_back({names[g], measured, predicted[g] ? std::optional<std::int64_t>(expected) : std::nullopt,
                        totals[3 * g + 2] == 0});
  }
  return r;
}

}  // namespace wf::cli
