#include "src/cli/checkpoint_option.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/core/error.h"

namespace wf::cli {
namespace {

namespace fs = std::filesystem;

// What to do instead of the step directory `dir`: its run's checkpoint.dir (whose newest checkpoint
// that loads is used) or the step before it.
std::string other_checkpoints_fix(const std::string& dir) {
  // "ckpt/step-00000006/" and "." name the directory itself, as the checkpoint reader takes them.
  std::error_code ec;
  fs::path step = fs::absolute(dir, ec).lexically_normal();
  if (!step.has_filename()) step = step.parent_path();
  const std::string store = step.parent_path().string();
  const std::vector<std::string> all = train::CheckpointStore(store, 0).list();  // oldest first
  std::string previous;  // the newest before `dir` (the newest of all when `dir` is not a step-* name)
  for (const std::string& other : all) {
    if (fs::path(other).filename() == step.filename()) break;
    previous = other;
  }
  if (all.empty() || (all.size() == 1 && fs::path(all.front()).filename() == step.filename())) {
    return fmt::format("its run '{}' holds no other checkpoint; train again", store);
  }
  return fmt::format("to use the newest checkpoint of the run that loads, give --checkpoint {} (the run's "
                     "checkpoint.dir){}",
                     store, previous.empty() ? "" : fmt::format(", or the previous step: --checkpoint {}", previous));
}

}  // namespace

train::Checkpoint load_checkpoint_option(const std::string& path, const train::CheckpointCheck& check) {
  WF_USER_CHECK(!path.empty() && fs::exists(path),
                "--checkpoint '{}': no such file or directory; give checkpoint.dir of a run or one of its step-* "
                "directories",
                path);
  if (fs::exists(fs::path(path) / "manifest.json")) {
    try {
      train::Checkpoint checkpoint = train::CheckpointStore(fs::path(path).parent_path().string(), 0).load(path);
      if (check) check(checkpoint);
      return checkpoint;
    } catch (const Error& e) {
      WF_USER_FAIL("--checkpoint {}: {}; {}", path, e.what(), other_checkpoints_fix(path));
    }
  }
  // A run's checkpoint.dir: load_latest skips a newer checkpoint that fails, with a warning.
  std::optional<train::Checkpoint> latest = train::CheckpointStore(path, 0).load_latest(check);
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

CheckpointAndConfig load_checkpoint_and_config(const std::string& path) {
  std::optional<config::RunConfig> config;
  // Called on each checkpoint tried, newest first: the config kept is the one of the checkpoint returned.
  const auto saved_config = [&](const train::Checkpoint& checkpoint) {
    const std::string manifest = (fs::path(checkpoint.dir) / "manifest.json").string();
    config = single_process_config(config::parse_config(checkpoint.config_yaml, {}, manifest),
                                   fmt::format("{} (the run config saved in it)", manifest));
  };
  train::Checkpoint checkpoint = load_checkpoint_option(path, saved_config);
  return {std::move(checkpoint), std::move(*config)};
}

}  // namespace wf::cli
