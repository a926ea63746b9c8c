#pragma once
// Where a run writes (checkpoint.dir, log.dir) is checked before its first step, so that an
// unwritable path fails the job at once instead of at the first checkpoint, hours in.
#include <string>
#include <string_view>

#include "wallfacer/config/run_config.h"

namespace wf::train {

// Creates directory `dir` (and its parents) if needed, then creates and removes a probe file in
// it. wf::UserError naming `key` (e.g. "checkpoint.dir"), the path and the system's reason when
// either fails.
void check_writable_dir(std::string_view key, const std::string& dir);

// check_writable_dir for checkpoint.dir and log.dir of `config`.
void check_output_dirs(const config::RunConfig& config);

// For a run started with --no-resume (at step 0): wf::UserError when checkpoint.dir = `dir`
// already holds complete checkpoints (another run's, or this run's older ones), naming the
// directory, how many there are and the newest step, and the fixes (another checkpoint.dir,
// deleting them, or dropping --no-resume). Starting anyway would mix the two runs: pruning to
// keep_last keeps the newest steps, i.e. the stale ones, and a later resume continues them.
void check_no_checkpoints(const std::string& dir);

}  // namespace wf::train
