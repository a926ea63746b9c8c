// config::overrides_between: the --set flags that turn one run config into another, e.g. the
// user's file into the layout `wallfacer tune` found best, so the answer is a command line.
#include <fmt/format.h>

#include "src/config/schema.h"
#include "wallfacer/config/model_schema.h"
#include "wallfacer/config/run_config.h"

namespace wf::config {

std::vector<std::string> overrides_between(const RunConfig& from, const RunConfig& to) {
  std::vector<std::string> out;
  const bool same_model = from.model.name == to.model.name;
  if (!same_model) out.push_back("model.name=" + to.model.name);  // first: it decides which keys exist
  for (const ModelKey& k : model_schema(to.model.name).keys) {
    const std::string value = to.model.get(k.key);
    if (!same_model || from.model.get(k.key) != value) out.push_back(fmt::format("model.{}={}", k.key, value));
  }
  for (const detail::Field& f : detail::fields()) {
    const std::string value = f.get(to);
    if (f.get(from) != value) out.push_back(f.path() + "=" + value);
  }
  return out;
}

}  // namespace wf::config
