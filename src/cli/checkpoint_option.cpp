#include "src/cli/checkpoint_option.h"

#include <filesystem>
#include <optional>

#include "wallfacer/core/error.h"

namespace wf::cli {

train::Checkpoint load_checkpoint_option(const std::string& path) {
  WF_USER_CHECK(std::filesystem::exists(path),
                "--checkpoint {}: no such file or directory; give checkpoint.dir of a run or one of its step-* "
                "directories",
                path);
  if (std::filesystem::exists(std::filesystem::path(path) / "manifest.json")) {
    return train::CheckpointStore(std::filesystem::path(path).parent_path().string(), 0).load(path);
  }
  std::optional<train::Checkpoint> latest = train::CheckpointStore(path, 0).load_latest();
  WF_USER_CHECK(latest.has_value(),
                "--checkpoint {}: holds no complete checkpoint (no step-*/manifest.json); train first or point at "
                "checkpoint.dir of a run",
                path);
  return std::move(*latest);
}

config::RunConfig single_process_config(config::RunConfig config, const std::string& what) {
  // Sampling runs in this one process, whatever layout the model was trained with.
  config.parallel = config::ParallelSection{};
  try {
    config::validate(config, 1, config::ValidateScope::any_machine);
  } catch (const Error& e) {
    WF_USER_FAIL("{}: the run config is not valid for one process here: {}", what, e.what());
  }
  return config;
}

}  // namespace wf::cli
