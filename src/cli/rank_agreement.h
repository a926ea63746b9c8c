#pragma once
// Checks whose verdict every rank of a job must share, so that bad input ends every rank with the
// same message and no rank goes on into a collective the others never reach (train, tune); and a
// main that reports a failure once for the whole job instead of once per rank (train).
#include <functional>
#include <string>
#include <vector>

#include "src/cli/failure_report.h"
#include "wallfacer/comm/group.h"

namespace wf::cli {

// Runs `check` on rank 0 only and shares its verdict: when it throws, every rank throws the
// same message (wf::UserError stays one), so the job ends with it on every rank and no rank
// goes on into a collective that rank 0 never reaches.
void check_on_rank0_for_all(comm::Group& world, const std::function<void()>& check);

// Runs `body` on every rank of `world`; a wf::UserError that every rank throws alike (bad input,
// found by check_on_rank0_for_all or by the same deterministic check everywhere) is printed once,
// by rank 0, as "wallfacer: error: ...", and every rank returns kExitRuntimeError. Anything else
// propagates (to run_main, which ends the job from the failing rank).
int run_with_shared_errors(comm::Group& world, const std::function<int()>& body);

// comm::run_main for a command every rank runs (train): initialises the runtime, runs `body`,
// finalises. When `body` throws on every rank within a few seconds of each other (a bad config, a
// missing file), the ranks exchange their messages, rank 0 prints failure_report, and every rank
// finalises MPI and returns kExitRuntimeError: no MPI_Abort, so mpirun adds only its note about a
// non-zero exit. A rank whose failure the others do not join in time (they wait in a collective it
// never reaches) ends the job at once as run_main does (Runtime::abort), so nothing hangs.
int run_main_reporting_once(const std::function<int()>& body);

}  // namespace wf::cli
