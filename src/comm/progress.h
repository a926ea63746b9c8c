#pragma once
// Progress of MPI transfers: the progress thread that moves non-blocking P2P while the caller
// computes, and the busy-then-back-off wait every MpiBackend call completes through.
//
// Open MPI's shared-memory transport moves a large (rendezvous) message only while some MPI
// call runs on the sending and the receiving rank: an isend / irecv posted before a 50 ms
// kernel would otherwise sit still until wait(). So every request that MpiBackend hands back
// to the caller (isend, irecv, isendrecv, iall_reduce) is also given to a progress thread, which tests the
// pending ones every ~50 µs and sleeps on a condition variable while there are none. Kernels
// need not know about MPI.
//
// Mode: WF_COMM_PROGRESS=thread (default) or off; set_progress_mode() switches it at run time
// (benchmarks compare the two in one run). Requests posted while it is off are not tracked;
// those already tracked stay tracked until they complete. The thread needs
// MPI_THREAD_MULTIPLE: with a lower thread level it stays off (with one warning).
//
// MPI forbids two threads completing the same request, so a request's handles live in a
// PendingOperation with a mutex: its owner holds it to test or wait, the thread only
// try-locks it (an owner that is waiting makes progress itself). The thread is stopped and
// joined from a delete callback on MPI_COMM_SELF, which MPI_Finalize runs first, so it never
// calls MPI after finalisation.
//
// How fast the thread moves a message depends on the transport: with the single-copy path
// (CMA) one test by the receiver copies the whole message, so 16 MiB finished within ~10 ms
// of compute on a loaded 2-core machine; without it (btl_vader_single_copy_mechanism none, as
// the tests run) a message goes as 32 KiB fragments, a few per test, and the same 16 MiB took
// ~300 ms (docs/communication.md). Longer bursts of tests per wake-up made it slower there,
// since the bursts took the cores the peers' threads needed.
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "src/comm/mpi_util.h"
#include "src/comm/watchdog.h"

namespace wf::comm {

enum class ProgressMode { thread, off };
const char* progress_mode_name(ProgressMode mode);
// "thread" / "off"; wf::Error naming the choices otherwise.
ProgressMode parse_progress_mode(std::string_view text);
ProgressMode progress_mode();  // from WF_COMM_PROGRESS at first use, then set_progress_mode
void set_progress_mode(ProgressMode mode);
// How often the thread tests pending requests.
inline constexpr auto kProgressInterval = std::chrono::microseconds(50);

// The MPI requests of one non-blocking operation (isendrecv has two) and how each completed.
struct PendingOperation {
  static constexpr int kMaxRequests = 2;
  std::mutex mutex;  // held by whoever tests or waits on `requests`
  std::array<MPI_Request, kMaxRequests> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::array<MPI_Status, kMaxRequests> statuses{};  // statuses[i].MPI_ERROR: request i's outcome
  int count = 0;
  std::atomic<bool> complete{false};

  std::span<MPI_Request> pending() { return {requests.data(), static_cast<std::size_t>(count)}; }
  std::span<MPI_Status> outcomes() { return {statuses.data(), static_cast<std::size_t>(count)}; }
  // Tests every request still pending once; true (and `complete` set) when none is left. The
  // caller holds `mutex`.
  bool test_all();
};

// Tests each request still pending once (MPI_REQUEST_NULL entries are skipped), setting
// statuses[i].MPI_ERROR for each that completes; true when none is left.
bool test_pending(std::span<MPI_Request> requests, std::span<MPI_Status> statuses);

// How MpiBackend waits: like wait_all (watchdog.h), whose deadline and message it keeps, but
// first it keeps MPI busy for up to kBusyWait — MPI_Test and yield, as MPI's own blocking
// calls do under mpi_yield_when_idle. A large transfer moves only while MPI is called on both
// ranks, and wait_all's sleeps (growing to 1 ms between tests) made a 16 MiB all_reduce up to
// 20x slower than MPI_Allreduce (docs/communication.md). The yields leave the core to a peer
// that shares it: the 8-rank test suite on 2 cores ran no slower. After kBusyWait (a
// straggler, a hang) wait_all's back-off takes over, so its deadline counts from then.
// Returns the first MPI error any request completed with, or MPI_SUCCESS. Statuses of
// requests that were already MPI_REQUEST_NULL must hold MPI_ERROR = MPI_SUCCESS
// (value-initialised).
int wait_busy_then_back_off(std::span<MPI_Request> requests, std::span<MPI_Status> statuses, const CallSite& site);
inline constexpr auto kBusyWait = std::chrono::seconds(1);

// Hands `operation` to the progress thread (starting it on first use) when the mode is
// thread; does nothing when it is off.
void track_for_progress(std::shared_ptr<PendingOperation> operation);

// Operations the progress thread is watching now (0 when idle or off); for tests.
int progress_tracked_count();

}  // namespace wf::comm
