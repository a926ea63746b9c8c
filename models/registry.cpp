#include <algorithm>
#include <map>
#include <mutex>

#include "wallfacer/core/error.h"
#include "wallfacer/models/model.h"

namespace wf::models {
namespace {

// Function-local statics: registrations run from other translation units' static
// initialisers, whose order relative to this file is unspecified.
std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> factories;
  return factories;
}
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

parallel::SpAttentionConfig sp_attention_config(const config::RunConfig& config, bool causal) {
  parallel::SpAttentionConfig sp;
  sp.strategy = config.parallel.sp_strategy;
  sp.layout = causal ? parallel::SequenceLayout::zigzag : parallel::SequenceLayout::contiguous;
  sp.seq_len = config.train.seq_len;
  return sp;
}

void register_model(const std::string& name, ModelFactory factory) {
  WF_CHECK(!name.empty() && factory != nullptr, "register_model: the name must be non-empty and the factory set");
  std::lock_guard lock(registry_mutex());
  WF_CHECK(registry().emplace(name, std::move(factory)).second,
           "register_model: a model named '{}' is already registered; pick another name", name);
}

std::vector<std::string> registered_models() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;  // std::map: sorted
}

std::shared_ptr<Model> create(const std::string& name, const config::RunConfig& config, comm::CommGrid& grid) {
  ModelFactory factory;
  {
    std::lock_guard lock(registry_mutex());
    const auto it = registry().find(name);
    if (it != registry().end()) factory = it->second;
  }
  WF_CHECK(factory != nullptr, "model.name: no model named '{}' is registered; the registered models are {}", name,
           fmt::join(registered_models(), ", "));
  std::shared_ptr<Model> model = factory(config, grid);
  WF_CHECK(model != nullptr, "the factory of model '{}' returned no model", name);
  return model;
}

std::shared_ptr<Model> create(const config::RunConfig& config, comm::CommGrid& grid) {
  return create(config.model.name, config, grid);
}

}  // namespace wf::models
