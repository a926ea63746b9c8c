#pragma once
// The few lines `train` ends with (rank 0): what the run did, where its metrics and checkpoints
// went, and the commands to run next; after a stop signal, where the checkpoint went and the
// command that resumes.
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"
#include "wallfacer/train/trainer.h"

namespace wf::cli {

struct RunInvocation {
  std::string config_path;
  std::vector<std::string> overrides;  // the --set flags, to repeat in the commands suggested
  int world_size = 1;
};

std::vector<std::string> run_summary(const config::RunConfig& config, const RunInvocation& run,
                                     const train::Trainer::FitSummary& fit);

}  // namespace wf::cli
