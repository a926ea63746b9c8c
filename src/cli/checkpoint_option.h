#pragma once
// The --checkpoint option of the commands that use a trained model (generate, sample): a run's
// checkpoint.dir (its newest complete checkpoint) or one step-* directory.
#include <string>

#include "wallfacer/config/run_config.h"
#include "wallfacer/train/checkpoint.h"

namespace wf::cli {

// wf::UserError naming the path and the fix when it holds no complete checkpoint.
train::Checkpoint load_checkpoint_option(const std::string& path);

// `config` as one process runs it (parallel section reset), validated for this machine's
// purpose; wf::UserError naming `what` (the config's origin) when it is not valid.
config::RunConfig single_process_config(config::RunConfig config, const std::string& what);

}  // namespace wf::cli
