#pragma once
// wf::models::Model: what the trainer, `wallfacer generate` and the pipeline schedules need from
// any model definition, and the registry that builds one by name from a run configuration
// (`model.name` in the YAML file) and declares its `model:` keys (config/model_schema.h).
//
// A model trains on a named batch (Batch: GPT and LLaMA read "tokens", "targets", "positions",
// and with packed documents the batch's documents;
// DiT will read images, labels and diffusion draws) and returns the SUM of its per-element
// losses and how many elements it counted (LossSum). Under data and sequence parallelism a rank
// holds micro_batch_size sequences (its dp slice) and of each only its tokens (its sp slice, in
// the layout the attention strategy needs); the trainer sums loss and count over ranks and
// microbatches and normalises once by the global count, so the loss is the exact mean over
// every counted element whatever the layout, also when targets are ignored (ignore_index).
//
// Adding a model: docs/adding-a-model.md.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/data/loader.h"
#include "wallfacer/models/batch_source.h"
#include "wallfacer/nn/layer_factory.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/nn/token_positions.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::models {

// Tensors by name: what one rank trains on in one micro step.
class Batch {
 public:
  Batch& set(std::string name, Tensor tensor);
  // wf::Error naming the missing tensor and the ones the batch has.
  const Tensor& at(std::string_view name) const;
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  std::vector<std::string> names() const;

  // Packed documents: per row, the global cumulative boundaries of the row's documents
  // (data::Batch::doc_bounds), which attention keeps apart. Host data beside the tensors: it
  // stays on the host when the tensors move to a device. Empty: each row is one document.
  Batch& set_documents(DocumentBounds documents);
  const DocumentBounds& documents() const { return documents_; }

 private:
  std::map<std::string, Tensor, std::less<>> tensors_;
  DocumentBounds documents_;
};

// A language-model batch: "tokens" and "targets" [B, n_local] i64, "positions" [n_local] i64
// (each local token's position in the sequence). With packed documents (`packed`, data.pack) the
// positions are per row, [B, n_local]: each token's position inside its document
// (data::Batch::doc_positions), and the batch's documents are the rows' (doc_bounds), as the
// loader gives them for whatever layout it laid the tokens out in.
Batch token_batch(const data::Batch& batch, bool packed = false);
Batch token_batch(Tensor tokens, Tensor targets, Tensor positions, DocumentBounds documents = {});
// The positions and documents a language model's blocks read from its batch.
nn::TokenPositions token_positions(const Batch& batch);

// A loss as its sum and the number of elements counted into it (targets equal to ignore_index
// are not counted). Both stay on the loss's device: the trainer adds them up there and reads the
// host once per logged step (docs/devices.md).
struct LossSum {
  Tensor sum;    // differentiable 0-dim tensor
  Tensor count;  // 0-dim i64 on sum's device
  LossSum() = default;
  // A count the device computed (count_targets_device).
  LossSum(Tensor loss_sum, Tensor counted) : sum(std::move(loss_sum)), count(std::move(counted)) {}
  // A count the host knows (every element of a known shape counts): copied beside the sum.
  LossSum(Tensor loss_sum, std::int64_t counted)
      : sum(std::move(loss_sum)), count(Tensor::scalar(static_cast<double>(counted), DType::i64).to(sum.device())) {}
};

// The part of a model one pipeline rank holds: blocks by their global index, one contiguous range
// per model chunk (one chunk, except under the interleaved schedule, where chunk c of pp rank r is
// global stage c·pp + r), the embedding (on the first chunk of the first stage) and the head and
// loss (on the last chunk of the last stage). Names and seeds come from the global block index,
// so a stage's weights are bit for bit the matching part of the whole model.
struct BlockRange {
  std::int64_t first = 0;
  std::int64_t end = -1;  // -1: through the last block
  friend bool operator==(const BlockRange&, const BlockRange&) = default;
};
struct StageRange {
  std::vector<BlockRange> chunks = {BlockRange{}};
  bool embedding = true;
  bool head = true;
  // Whether it is the whole of a model of n_blocks blocks.
  bool whole(std::int64_t n_blocks) const {
    return chunks.size() == 1 && chunks[0].first == 0 && (chunks[0].end < 0 || chunks[0].end == n_blocks) &&
           embedding && head;
  }
  int num_chunks() const { return static_cast<int>(chunks.size()); }
  friend bool operator==(const StageRange&, const StageRange&) = default;
};

// What pp rank `pp_rank` holds under the run's pipeline (parallel.pp, pp_virtual, pp_layers):
// the whole model at pp = 1.
StageRange pipeline_stage(const config::RunConfig& config, int pp_rank);
// The same for this rank of the grid (its pp coordinate): what a model factory builds.
StageRange pipeline_stage(const config::RunConfig& config, const comm::ProcessGrid& grid);

// What one stage hands to the next: hidden states, or on the last stage the loss.
struct StageOutput {
  Tensor hidden;  // [B, n_local, d_model]; undefined on the last stage
  LossSum loss;   // on the last stage
};

class Model : public nn::Module {
 public:
  using nn::Module::Module;

  virtual std::string name() const = 0;
  // The loss of this rank's part of a batch (see above).
  virtual LossSum loss_sum(const Batch& batch) = 0;
  // Model FLOPs of one training step (forward + backward) per token of a seq_len sequence, for
  // the FLOP/s and utilisation the trainer reports. Counts the matmuls and attention only.
  virtual double train_flops_per_token(std::int64_t seq_len) const = 0;
  // Whether attention is causal: decides the sequence layout (zigzag for causal).
  virtual bool causal() const = 0;

  // ---- decoding (wallfacer generate) ------------------------------------------------------
  // Models that predict tokens: logits(ids [B, n], positions [n]) → [B, n, vocab_size].
  virtual bool has_logits() const { return false; }
  virtual Tensor logits(const Tensor& ids, const Tensor& positions);  // default: wf::Error naming the model
  virtual std::int64_t vocab_size() const { return 0; }
  // The longest context logits accepts (its positions are < this); 0: unbounded.
  virtual std::int64_t max_context() const { return 0; }

  // ---- stages (pipeline parallelism) ------------------------------------------------------
  // The part of the model this instance holds; the whole model by default.
  virtual StageRange stage() const { return {}; }
  // Runs model chunk `chunk` of this stage: the first stage's first chunk reads the batch's
  // inputs and ignores `hidden`; the others continue from the previous stage's hidden states;
  // the last returns the loss. The default runs the whole model (loss_sum): a model that can be
  // built as stages overrides it (and builds the part pipeline_stage names).
  virtual StageOutput forward_stage(const Batch& batch, const Tensor& hidden, int chunk = 0);
  // The shape and dtype of the hidden states stages exchange for `batch` (this rank's slice of
  // a microbatch): what a stage receives before it runs. Models built as stages override it.
  virtual std::pair<Shape, DType> stage_hidden(const Batch& batch) const;
  // Parameters this stage shares with another pipeline stage (the tied token embedding, held by
  // the first stage and as a copy by the last, which has no `embedding`): the trainer sums their
  // gradients over the grid's pp.embedding group before the update, counts them once in the
  // gradient norm and writes the first stage's copy to checkpoints. Empty for a whole model.
  virtual std::vector<std::string> pipeline_shared_parameters() const { return {}; }
};

// Indices into model.parameters() of model.pipeline_shared_parameters(): what the trainer lays
// out isolated and sums over pp.embedding (and the traffic prediction counts). wf::Error naming a
// shared parameter the model does not hold.
std::vector<std::size_t> pipeline_shared_parameter_indices(const Model& model);

// wf::UserError naming the model when it has no logits (it cannot generate text).
void require_logits(const Model& model);

// The sequence-parallel attention configuration a run uses: the strategy and sequence length
// from the config, the layout from the mask (zigzag balances causal work, contiguous otherwise).
// The data loader shards tokens with the same configuration (parallel::sp_shard).
parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config, bool causal);
// The same with the mask of the model config.model describes (config::model_facts).
parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config);

// ---- registry ---------------------------------------------------------------------------

// Builds the model for this rank: weights initialised from train.seed (the same on every rank
// that replicates them) and attention wired to the grid's sequence-parallel groups.
using ModelFactory = std::function<std::shared_ptr<Model>(const config::RunConfig&, comm::CommGrid&)>;

// Registers a model: its config schema (whose name is the model's name; keys, rules, facts), its
// factory and, for a model that does not read token windows, the factory of its batches
// (batch_source.h; null: the token loader). wf::Error when the name is taken. After this
// `model.name: <name>` works in YAML.
void register_model(config::ModelSchema schema, ModelFactory factory, BatchSourceFactory batches = nullptr);
// The batch factory model `name` registered; null for a token model (or an unknown name).
BatchSourceFactory batch_source_factory(std::string_view name);
// Builds the model config.model names; wf::Error listing the registered names when unknown.
std::shared_ptr<Model> create(const config::RunConfig& config, comm::CommGrid& grid);
std::vector<std::string> registered_models();  // sorted

// Registers a model at load time:
//   static const wf::models::ModelRegistration reg(llama_schema(), make_llama);
struct ModelRegistration {
  ModelRegistration(config::ModelSchema schema, ModelFactory factory, BatchSourceFactory batches = nullptr) {
    register_model(std::move(schema), std::move(factory), std::move(batches));
  }
};

// With sp > 1, installs the run's sequence-parallel attention strategy on every attention layer
// of `model` (nn::set_attention_strategy); a no-op for sp = 1. Factories call it.
void install_sp_attention(Model& model, const config::RunConfig& config, comm::CommGrid& grid);

// The layer factory of the run's tensor parallelism: with tp > 1, parallel::TensorParallelLayers
// over the grid's tp group (the grid must outlive the model); null (the plain layers) at tp = 1.
// A model built from the nn blocks with it is the tp-1 model cut up.
std::shared_ptr<const nn::LayerFactory> tensor_parallel_layers(const config::RunConfig& config, comm::CommGrid& grid);

}  // namespace wf::models
