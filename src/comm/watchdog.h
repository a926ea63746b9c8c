#pragma once
// The watchdog: every blocking communication call is a non-blocking MPI call followed by
// wait_all(), which polls with MPI_Test and aborts the whole job when the requests have not
// completed within watchdog_timeout(). A rank that skips a collective then ends the job with a
// message naming the group, the call and the rank, instead of hanging until the batch system
// kills it.
#include <functional>
#include <span>
#include <string>

#include "src/comm/mpi_util.h"

namespace wf::comm {

// Who is waiting, for the watchdog's message.
struct CallSite {
  const std::string& group;
  const char* primitive;
  int group_rank;
  int group_size;
};

// Completes every request (MPI_REQUEST_NULL entries are skipped), filling statuses[i] for each,
// with statuses[i].MPI_ERROR set to that request's outcome.
// Returns MPI_SUCCESS, or the first MPI error code a request completed with (the others are
// still completed, so no request is left pending). Aborts the job through Runtime::abort when
// they have not all completed within watchdog_timeout().
int wait_all(std::span<MPI_Request> requests, std::span<MPI_Status> statuses, const CallSite& site);

// Runs a BLOCKING MPI call under the watchdog: a monitor thread aborts the job, with the
// message wait_all would give, when `call` has not returned within watchdog_timeout(). For
// collectives whose blocking form Open MPI runs faster than the non-blocking one (its tuned
// MPI_Allgather against libnbc's MPI_Iallgather: docs/communication.md). Returns call's code.
int run_watched(const CallSite& site, const std::function<int()>& call);

// Polls `done` until it returns true, with wait_all's back-off (yields, then growing sleeps), and
// aborts the job with wait_all's message when it has not within watchdog_timeout(), after calling
// `before_abort` (a device transport tears its communicator down there, so no kernel stays stuck
// on the GPU). `done` may throw an error it finds (a peer's failure reported by the transport).
// The wait of a request on a device's communication stream (stream_backend.h).
void wait_until(const CallSite& site, const std::function<bool()>& done,
                const std::function<void()>& before_abort = {});

// MPI_Test on one request: whether it has completed; `rc` receives its MPI error code.
bool test_one(MPI_Request& request, MPI_Status& status, int& rc);

// The user-level call a backend call serves, for the watchdog's message: Group labels the
// header exchange of an all_reduce's argument check "all_reduce (argument check)" so a hang
// there is not reported as the all_gather that implements it. One label per thread; a nested
// label restores the outer one when it ends.
class CallLabel {
 public:
  explicit CallLabel(const char* label);
  ~CallLabel();
  CallLabel(const CallLabel&) = delete;
  CallLabel& operator=(const CallLabel&) = delete;
  // The innermost label on this thread, or `fallback` when there is none.
  static const char* current_or(const char* fallback);

 private:
  const char* previous_;
};

}  // namespace wf::comm
