#pragma once
// Checks whose verdict every rank of a job must share, so that bad input ends every rank with the
// same message and no rank goes on into a collective the others never reach (train, tune).
#include <functional>

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

}  // namespace wf::cli
