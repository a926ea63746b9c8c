#pragma once
// wf::models::Model: what the trainer needs from any model definition, and the registry that
// builds one by name from a run configuration (`model.name` in the YAML file).
//
// A model computes a loss on this rank's part of a batch. Under data and sequence parallelism a
// rank holds micro_batch_size sequences (its dp slice) and of each sequence only its n_local
// tokens (its sp slice, in the layout the attention strategy needs); `positions` gives every
// local token's true position in its sequence. The model returns the SUM of its per-token losses
// (not the mean): the trainer divides by the token count of the whole global batch, so the loss
// is averaged over tokens exactly once across dp × sp × microbatches, whatever the layout.
//
// Adding a model: docs/adding-a-model.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::models {

class Model : public nn::Module {
 public:
  using nn::Module::Module;

  virtual std::string name() const = 0;
  // inputs, targets [B, n_local] i64; positions [n_local] i64. Returns the sum over this rank's
  // targets of the per-token loss, a differentiable 0-dim tensor.
  virtual Tensor loss_sum(const Tensor& inputs, const Tensor& targets, const Tensor& positions) = 0;
  // Model FLOPs of one training step (forward + backward) per token of a seq_len sequence, for
  // the FLOP/s and utilisation the trainer reports. Counts the matmuls and attention only.
  virtual double train_flops_per_token(std::int64_t seq_len) const = 0;
  // Whether attention is causal: decides the sequence layout (zigzag for causal).
  virtual bool causal() const = 0;
};

// The sequence-parallel attention configuration a run uses: the strategy and sequence length
// from the config, the layout from the mask (zigzag balances causal work, contiguous otherwise).
// The data loader shards tokens with the same configuration (parallel::sp_shard).
parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config, bool causal);

// ---- registry ---------------------------------------------------------------------------

// Builds the model for this rank: weights initialised from train.seed (the same on every rank
// that replicates them) and attention wired to the grid's sequence-parallel groups.
using ModelFactory = std::function<std::shared_ptr<Model>(const config::RunConfig&, comm::CommGrid&)>;

// Registers a factory under `name`; wf::Error when the name is taken.
void register_model(const std::string& name, ModelFactory factory);
// Builds the model registered as `name`; wf::Error listing the registered names when unknown.
std::shared_ptr<Model> create(const std::string& name, const config::RunConfig& config, comm::CommGrid& grid);
// create(config.model.name, config, grid).
std::shared_ptr<Model> create(const config::RunConfig& config, comm::CommGrid& grid);
std::vector<std::string> registered_models();  // sorted

// Registers a model at load time: `static const wf::models::ModelRegistration reg("gpt", make_gpt);`
struct ModelRegistration {
  ModelRegistration(const std::string& name, ModelFactory factory) { register_model(name, std::move(factory)); }
};

}  // namespace wf::models
