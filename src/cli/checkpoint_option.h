#pragma once
// The --checkpoint option of the commands that use a trained model (generate, sample): a run's
// checkpoint.dir (its newest complete checkpoint) or one step-* directory.
#include <string>

#include "wallfacer/config/run_config.h"
#include "wallfacer/train/checkpoint.h"

namespace wf::cli {

// The checkpoint at `path` that passes `check`: with a run's checkpoint.dir the newest one, a
// newer one that does not load or that `check` rejects being skipped with a warning (the previous
// step is used); with one step-* directory that one, or wf::UserError naming it, the problem and
// the fix (another checkpoint of its run). wf::UserError naming the path and the fix when it holds
// no complete checkpoint.
train::Checkpoint load_checkpoint_option(const std::string& path, const train::CheckpointCheck& check = {});

// `config` as one process runs it (parallel section reset), validated for this machine's
// purpose; wf::UserError naming `what` (the config's origin) when it is not valid.
config::RunConfig single_process_config(config::RunConfig config, const std::string& what);

// The checkpoint at `path` (as load_checkpoint_option) with the run config saved in it, as one
// process runs it: a checkpoint whose saved config does not parse or validate is rejected, with
// its manifest named.
struct CheckpointAndConfig {
  train::Checkpoint checkpoint;
  config::RunConfig config;
};
CheckpointAndConfig load_checkpoint_and_config(const std::string& path);

}  // namespace wf::cli
