#include "wallfacer/train/parallel_training.h"

#include "wallfacer/core/error.h"
#include "wallfacer/parallel/sp_attention.h"
#include "wallfacer/parallel/tensor_parallel.h"
#include "wallfacer/train/grad_sync.h"
#include "wallfacer/train/optimizer.h"

namespace wf::train {

ParallelTraining::ParallelTraining(const config::RunConfig& config) : config_(config) {
  comm::Runtime& runtime = comm::Runtime::get();
  // The config alone: a loop of the program's own may train what the Trainer does not yet.
  config::validate(config_, runtime.world_size(), config::ValidateScope::any_machine);
  // Its gradient sync is the replica group's alone: a pipeline's stages need the Trainer's schedule.
  WF_USER_CHECK(config_.parallel.pp == 1,
                "parallel.pp: pp = {}: ParallelTraining runs data, tensor and sequence parallelism; pipeline "
                "parallelism needs train::Trainer (its schedule moves the activations between stages); set "
                "parallel.pp to 1 or train with wf::train::Trainer",
                config_.parallel.pp);
  grid_ = std::make_unique<comm::CommGrid>(comm::ProcessGrid(config_.parallel.grid(), runtime.world_size(),
                                                             runtime.rank()));
}

ParallelTraining::~ParallelTraining() = default;

std::shared_ptr<const nn::LayerFactory> ParallelTraining::layers() {
  return models::tensor_parallel_layers(config_, *grid_);
}

void ParallelTraining::install(models::Model& model) {
  // shard() lays tokens out by the mask of config.model; the model must attend with the same one.
  WF_USER_CHECK(model.causal() == config::model_facts(config_).causal,
                "ParallelTraining::install: model '{}' is {}, but the config's model '{}' is {}: shard() lays the "
                "tokens out for the config's mask; build the model the config names",
                model.name(), model.causal() ? "causal" : "not causal", config_.model.name,
                model.causal() ? "not causal" : "causal");
  models::install_sp_attention(model, config_, *grid_);
}

models::Batch ParallelTraining::shard(const Tensor& tokens, const Tensor& targets) const {
  const int dp = config_.parallel.dp;
  WF_CHECK(tokens.dim() == 2 && targets.shape() == tokens.shape() && tokens.size(1) == config_.train.seq_len &&
               tokens.size(0) % dp == 0,
           "ParallelTraining::shard: tokens and targets must both be [rows, train.seq_len = {}] with rows a multiple "
           "of parallel.dp = {}, got {} and {}",
           config_.train.seq_len, dp, shape_str(tokens.shape()), shape_str(targets.shape()));
  const std::int64_t rows = tokens.size(0) / dp, first = grid_->grid().coord("dp") * rows;
  const parallel::SpShard sp = parallel::sp_shard(models::sp_attention_config(config_), *grid_);
  const std::vector<std::int64_t> positions = parallel::run_positions(sp.runs());
  return models::token_batch(sp.shard(tokens.to(DType::i64).slice0(first, first + rows)),
                             sp.shard(targets.to(DType::i64).slice0(first, first + rows)),
                             Tensor::from_vector(positions, {static_cast<std::int64_t>(positions.size())}));
}

double ParallelTraining::sync_gradients(const std::vector<Tensor>& params, const models::LossSum& local) {
  // Without the model the parameters' shards are unknown, so partial gradients cannot be found.
  WF_USER_CHECK(config_.parallel.tp == 1 || !config_.parallel.tp_shard_activations,
                "ParallelTraining::sync_gradients: with parallel.tp_shard_activations the norms' gradients are "
                "partial sums over tp; pass the model (sync_gradients(model, loss)) so they are summed");
  comm::Group& replicas = grid_->group("dp_sp");
  all_reduce_gradients(replicas, params);
  LossTotals totals;
  totals.add(local.sum.item(), static_cast<std::int64_t>(local.count.item()));
  return normalise_gradients(replicas, params, totals);
}

double ParallelTraining::sync_gradients(const nn::Module& model, const models::LossSum& local) {
  // With activation sharding a norm's gradient is a partial sum over tp: summed there first.
  parallel::reduce_partial_gradients(model, grid_->group("tp"));
  return sync_gradients(model.parameters(), local);
}

double ParallelTraining::clip_grad_norm(const nn::Module& model, double max_norm) {
  return train::clip_grad_norm(model.parameters(), model.parameter_shards(), grid_->group("tp"), max_norm);
}

}  // namespace wf::train
