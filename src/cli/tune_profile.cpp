// `wallfacer tune --profile CFG.yaml` (stub while it is written).
#include "src/cli/commands.h"
#include "src/cli/tune_modes.h"
namespace wf::cli {
int run_tune_profile(const ProfileOptions&) { return kExitRuntimeError; }
}  // namespace wf::cli
