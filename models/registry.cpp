// The model registry, and the parts of the Model interface every model shares.
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "wallfacer/core/error.h"
#include "wallfacer/models/model.h"
#include "wallfacer/nn/self_attention.h"
#include "wallfacer/parallel/pipeline_stages.h"
#include "wallfacer/parallel/tensor_parallel.h"

namespace wf::models {
namespace {

// Function-local statics: registrations run from other translation units' static
// initialisers, whose order relative to this file is unspecified.
struct Registered {
  ModelFactory model;
  BatchSourceFactory batches;  // null: token windows
};
std::map<std::string, Registered, std::less<>>& registry() {
  static std::map<std::string, Registered, std::less<>> factories;
  return factories;
}
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

Batch& Batch::set(std::string name, Tensor tensor) {
  tensors_.insert_or_assign(std::move(name), std::move(tensor));
  return *this;
}

const Tensor& Batch::at(std::string_view name) const {
  const auto it = tensors_.find(name);
  WF_CHECK(it != tensors_.end(), "batch: the model needs a tensor '{}', but the batch holds only {}", name,
           tensors_.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(names(), ", ")));
  return it->second;
}

std::vector<std::string> Batch::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : tensors_) out.push_back(name);
  return out;
}

Batch& Batch::set_documents(DocumentBounds documents) {
  documents_ = std::move(documents);
  return *this;
}

Batch token_batch(Tensor tokens, Tensor targets, Tensor positions, DocumentBounds documents) {
  Batch batch;
  batch.set("tokens", std::move(tokens)).set("targets", std::move(targets)).set("positions", std::move(positions));
  return batch.set_documents(std::move(documents));
}

Batch token_batch(const data::Batch& batch, bool packed) {
  // Unpacked, every row is one document: the shared positions and no bounds keep attention on
  // its one-document path.
  if (!packed) return token_batch(batch.inputs, batch.targets, batch.positions);
  return token_batch(batch.inputs, batch.targets, batch.doc_positions, batch.doc_bounds);
}

nn::TokenPositions token_positions(const Batch& batch) { return {batch.at("positions"), batch.documents()}; }

void require_logits(const Model& model) {
  WF_USER_CHECK(model.has_logits(),
                "model '{}' does not predict tokens (it has no logits), so it cannot generate text; wallfacer "
                "generate serves language models such as gpt and llama",
                model.name());
}

Tensor Model::logits(const Tensor& /*ids*/, const Tensor& /*positions*/) {
  require_logits(*this);
  WF_FAIL("model '{}' says it has logits but does not override Model::logits", name());
}

StageOutput Model::forward_stage(const Batch& batch, const Tensor& /*hidden*/, int chunk) {
  WF_CHECK(chunk == 0, "model '{}' is not built as pipeline stages, so it has no model chunk {}", name(), chunk);
  return {Tensor(), loss_sum(batch)};
}

std::pair<Shape, DType> Model::stage_hidden(const Batch& /*batch*/) const {
  WF_FAIL("model '{}' is not built as pipeline stages: it does not say what its stages exchange (override "
          "Model::stage_hidden and forward_stage, docs/adding-a-model.md)",
          name());
}

std::vector<std::size_t> pipeline_shared_parameter_indices(const Model& model) {
  const std::vector<nn::NamedTensor> named = model.named_parameters();
  std::vector<std::size_t> indices;
  for (const std::string& name : model.pipeline_shared_parameters()) {
    const auto it = std::find_if(named.begin(), named.end(), [&](const nn::NamedTensor& n) { return n.first == name; });
    WF_CHECK(it != named.end(), "model '{}' shares parameter '{}' with another stage but does not hold it",
             model.name(), name);
    indices.push_back(static_cast<std::size_t>(it - named.begin()));
  }
  return indices;
}

StageRange pipeline_stage(const config::RunConfig& config, int pp_rank) {
  const config::ParallelSection& p = config.parallel;
  if (p.pp == 1) return {};
  WF_CHECK(pp_rank >= 0 && pp_rank < p.pp, "pipeline_stage: pp rank {} is outside [0, {})", pp_rank, p.pp);
  const std::vector<std::int64_t> layers =
      parallel::pipeline_stage_layers(config::model_facts(config).n_layer, p.pp, p.pp_virtual, p.pp_layers);
  // Chunk c of this rank is global stage c·pp + pp_rank; its blocks follow those of every stage before it.
  StageRange stage;
  stage.chunks.clear();
  for (int chunk = 0; chunk < p.pp_virtual; ++chunk) {
    const std::size_t global = static_cast<std::size_t>(chunk) * static_cast<std::size_t>(p.pp) + static_cast<std::size_t>(pp_rank);
    std::int64_t first = 0;
    for (std::size_t s = 0; s < global; ++s) first += layers[s];
    stage.chunks.push_back({first, first + layers[global]});
  }
  stage.embedding = pp_rank == 0;
  stage.head = pp_rank == p.pp - 1;
  return stage;
}

StageRange pipeline_stage(const config::RunConfig& config, const comm::ProcessGrid& grid) {
  return pipeline_stage(config, grid.coord("pp"));
}

parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config, bool causal) {
  parallel::SpAttentionConfig sp;
  sp.strategy = config.parallel.sp_strategy;
  sp.layout = parallel::layout_for_mask(causal);
  sp.seq_len = config.train.seq_len;
  return sp;
}

parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config) {
  return sp_attention_config(config, config::model_facts(config).causal);
}

void install_sp_attention(Model& model, const config::RunConfig& config, comm::CommGrid& grid) {
  if (config.parallel.sp <= 1) return;
  nn::set_attention_strategy(model, parallel::make_sp_attention(sp_attention_config(config, model.causal()), grid));
}

std::shared_ptr<const nn::LayerFactory> tensor_parallel_layers(const config::RunConfig& config, comm::CommGrid& grid) {
  if (config.parallel.tp <= 1) return nullptr;
  return std::make_shared<parallel::TensorParallelLayers>(
      grid.group("tp"), parallel::TensorParallelOptions{.shard_activations = config.parallel.tp_shard_activations});
}

void register_model(config::ModelSchema schema, ModelFactory factory, BatchSourceFactory batches) {
  WF_CHECK(factory != nullptr, "register_model: model '{}' needs a factory", schema.name);
  const std::string name = schema.name;
  {
    std::lock_guard lock(registry_mutex());
    WF_CHECK(!registry().contains(name), "register_model: a model named '{}' is already registered; pick another name",
             name);
  }
  config::register_model_schema(std::move(schema));  // checks the schema before the factory is kept
  std::lock_guard lock(registry_mutex());
  registry().emplace(name, Registered{std::move(factory), std::move(batches)});
}

BatchSourceFactory batch_source_factory(std::string_view name) {
  std::lock_guard lock(registry_mutex());
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second.batches;
}

std::vector<std::string> registered_models() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;  // std::map: sorted
}

std::shared_ptr<Model> create(const config::RunConfig& config, comm::CommGrid& grid) {
  const std::string& name = config.model.name;
  ModelFactory factory;
  {
    std::lock_guard lock(registry_mutex());
    const auto it = registry().find(name);
    if (it != registry().end()) factory = it->second.model;
  }
  if (factory == nullptr) config::model_schema(name);  // throws: names the registered models
  WF_CHECK(factory != nullptr, "model.name: model '{}' has a config schema but no factory", name);
  std::shared_ptr<Model> model = factory(config, grid);
  WF_CHECK(model != nullptr, "the factory of model '{}' returned no model", name);
  // The run's precision policy (nn/precision.h), applied once for every model: f32 masters,
  // computing in train.dtype.
  const nn::PrecisionPolicy precision = nn::PrecisionPolicy::for_train_dtype(config.train.dtype);
  if (precision.mixed()) model->set_compute_dtype(precision.compute);
  return model;
}

}  // namespace wf::models
