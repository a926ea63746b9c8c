#pragma once
// ParallelTraining: what a program that writes its own training loop needs to train a model
// with data, tensor and sequence parallelism, in one object: the grid of the config's layout
// over the MPI world, the layer factory of its tensor parallelism, the sequence-parallel
// attention installed on the model, this rank's shard of a batch, and the gradient sync with the
// loss normalised once by the global count. The Trainer does the same inside (and overlaps the
// all-reduce with the backward).
//
//   wf::comm::Runtime::init(argc, argv);
//   const auto config = wf::config::load_config("run.yaml");  // model.name may be your own model
//   wf::train::ParallelTraining parallel(config);             // validates against the world size
//   auto model = wf::models::create(config, parallel.grid()); // or your own, then parallel.install(*model)
//   wf::train::AdamW optimizer(model->parameters(), {.lr = 1e-3});
//   for (...) {
//     const wf::models::LossSum loss = model->loss_sum(parallel.shard(tokens, targets));  // global [rows, N]
//     wf::autograd::backward({loss.sum});
//     const double mean = parallel.sync_gradients(*model, loss);
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// tests/install/consumer is this loop as a complete program, run under mpirun with sp > 1.
#include <memory>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/models/model.h"

namespace wf::train {

class ParallelTraining {
 public:
  // Validates `config` for the world of comm::Runtime::get() (the same message on every rank)
  // and builds this rank's grid of config.parallel.
  explicit ParallelTraining(const config::RunConfig& config);
  ~ParallelTraining();

  comm::CommGrid& grid() { return *grid_; }
  const config::RunConfig& config() const { return config_; }

  // The layer factory a model of the program's own builds its blocks with (options.layers) so
  // that parallel.tp splits it: TensorParallelLayers over this grid's tp group, or null (the
  // plain layers) at tp = 1. models::create uses the same.
  std::shared_ptr<const nn::LayerFactory> layers();
  // Installs the run's sequence-parallel attention on every attention layer of `model` (a no-op
  // at sp = 1); models built by models::create already have it.
  void install(models::Model& model);
  // This rank's part of a global batch: tokens and targets [rows, seq_len] (i64, rows a multiple
  // of dp, the same on every rank) → rows of this dp rank, tokens of this rank's sp shard in the
  // layout the attention needs, and their true positions ("tokens", "targets", "positions").
  models::Batch shard(const Tensor& tokens, const Tensor& targets) const;
  // After the backward of this rank's loss sum: sums the gradients over the ranks that replicate
  // the weights or weight shards (dp × sp), divides them by the global count of loss elements and returns the
  // global mean loss (the same on every rank).
  double sync_gradients(const std::vector<Tensor>& params, const models::LossSum& local);
  // The same for a whole model, which first sums over tp the gradients its parameters' shards
  // mark partial (the norms under parallel.tp_shard_activations): what a tp run needs.
  double sync_gradients(const nn::Module& model, const models::LossSum& local);
  // Global gradient-norm clipping of the whole model (train::clip_grad_norm with the parameters'
  // shards over this grid's tp group): the single-process norm on every rank, so replicated
  // weights stay equal over tp. Returns the norm before clipping.
  double clip_grad_norm(const nn::Module& model, double max_norm);

 private:
  config::RunConfig config_;
  std::unique_ptr<comm::CommGrid> grid_;
};

}  // namespace wf::train
