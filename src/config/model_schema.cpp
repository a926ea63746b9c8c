// The registry of model schemas and the model section's set/get, which check every value
// against the schema of the section's model.
#include "wallfacer/config/model_schema.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "src/config/schema.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"

namespace wf::config {
namespace {

// Function-local statics: registrations run from other translation units' static
// initialisers, whose order relative to this file is unspecified.
std::map<std::string, ModelSchema, std::less<>>& schemas() {
  static std::map<std::string, ModelSchema, std::less<>> registry;
  return registry;
}
std::mutex& schemas_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

const ModelKey* ModelSchema::find(std::string_view key) const {
  for (const ModelKey& k : keys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::vector<std::string> ModelSchema::key_names() const {
  std::vector<std::string> names;
  for (const ModelKey& k : keys) names.push_back(k.key);
  return names;
}

void register_model_schema(ModelSchema schema) {
  WF_CHECK(!schema.name.empty() && schema.facts != nullptr,
           "register_model_schema: a model schema needs a name and a facts function");
  WF_CHECK(schema.find("name") == nullptr, "register_model_schema: model '{}' declares a key 'name', which is "
           "model.name itself; rename the key", schema.name);
  std::lock_guard lock(schemas_mutex());
  const std::string name = schema.name;
  WF_CHECK(schemas().emplace(name, std::move(schema)).second,
           "register_model: a model named '{}' is already registered; pick another name", name);
}

const ModelSchema* find_model_schema(std::string_view name) {
  std::lock_guard lock(schemas_mutex());
  const auto it = schemas().find(name);
  return it == schemas().end() ? nullptr : &it->second;
}

std::vector<std::string> model_schema_names() {
  std::lock_guard lock(schemas_mutex());
  std::vector<std::string> names;
  for (const auto& [name, schema] : schemas()) names.push_back(name);
  return names;
}

const ModelSchema& model_schema(std::string_view name) {
  if (const ModelSchema* schema = find_model_schema(name)) return *schema;
  const std::vector<std::string> names = model_schema_names();
  const std::string close = detail::closest_spelling(name, names);
  WF_USER_FAIL("model.name: '{}' is not a registered model{}; the registered models are {} (a model of your own must "
          "be registered before the config is read: docs/adding-a-model.md)",
          name, close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close), fmt::join(names, ", "));
}

ModelFacts model_facts(const RunConfig& config) { return model_schema(config.model.name).facts(config); }

std::string tp_split_problem(const RunConfig& config, std::string_view key, std::int64_t value,
                             std::string_view what, std::string_view why) {
  const ParallelSection& p = config.parallel;
  if (p.tp >= 1 && value % p.tp == 0) return "";
  // The model's rules run on a valid grid, so the world is the product of the four sizes.
  const std::int64_t world = static_cast<std::int64_t>(p.dp) * p.tp * p.pp * p.sp;
  std::vector<std::int64_t> fitting;
  for (std::int64_t tp = 1; tp <= world; ++tp) {
    if (world % tp == 0 && value % tp == 0) fitting.push_back(tp);
  }
  return fmt::format("model.{}: tensor parallelism splits {} over parallel.tp = {}, but {} = {}{}; use tp in {{{}}} "
                     "or {} a multiple of {}",
                     key, what, p.tp, key, value, why, fmt::join(fitting, ", "), key, p.tp);
}

namespace {

const ModelKey& key_of(const ModelSchema& schema, std::string_view key) {
  const ModelKey* k = schema.find(key);
  if (k != nullptr) return *k;
  std::vector<std::string> names = schema.key_names();
  names.insert(names.begin(), "name");
  const std::string close = detail::closest_spelling(key, names);
  WF_USER_FAIL("unknown key 'model.{}'{}; the keys of model '{}' are {}", key,
          close.empty() ? "" : fmt::format(" (did you mean 'model.{}'?)", close), schema.name, fmt::join(names, ", "));
}

}  // namespace

void ModelConfig::set(std::string_view key, std::string_view text) {
  if (key == "name") return set_name(text);
  const ModelKey& k = key_of(model_schema(name), key);
  std::string canonical;
  const std::string problem = k.check(text, canonical);
  WF_USER_CHECK(problem.empty(), "model.{}: '{}' {}; expected {}", key, text, problem, k.expected);
  values.insert_or_assign(std::string(key), std::move(canonical));
}

void ModelConfig::set_name(std::string_view model_name) {
  const ModelSchema& schema = model_schema(model_name);
  // Every given value must be a key of the new model and fit its type and range there.
  std::map<std::string, std::string, std::less<>> checked;
  for (const auto& [key, text] : values) {
    const ModelKey* k = schema.find(key);
    WF_USER_CHECK(k != nullptr,
                  "model.name: model '{}' has no key 'model.{}', which the config gives (for model '{}'); remove "
                  "it. The keys of model '{}' are {}",
                  model_name, key, name, model_name, fmt::join(schema.key_names(), ", "));
    std::string canonical;
    const std::string problem = k->check(text, canonical);
    WF_USER_CHECK(problem.empty(), "model.name: for model '{}', model.{}: '{}' {}; expected {}", model_name, key,
                  text, problem, k->expected);
    checked.emplace(key, std::move(canonical));
  }
  name = std::string(model_name);
  values = std::move(checked);
}

std::string ModelConfig::get(std::string_view key) const {
  if (key == "name") return name;
  const ModelKey& k = key_of(model_schema(name), key);
  const auto it = values.find(key);
  return it != values.end() ? it->second : k.default_text;
}

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  if (a.name != b.name) return false;
  const ModelSchema* schema = find_model_schema(a.name);
  if (schema == nullptr) return a.values == b.values;
  for (const ModelKey& k : schema->keys) {
    if (a.get(k.key) != b.get(k.key)) return false;
  }
  return true;
}

}  // namespace wf::config
