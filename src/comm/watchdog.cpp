#include "src/comm/watchdog.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/log.h"

namespace wf::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kDefaultTimeout{300'000};

milliseconds timeout_from_environment() {
  const char* env = std::getenv("WF_COMM_TIMEOUT");
  if (env == nullptr || *env == '\0') return kDefaultTimeout;
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(seconds > 0) || seconds > 1e9) {
    log::warn("ignoring WF_COMM_TIMEOUT='{}': expected a positive number of seconds; using {} s", env,
              kDefaultTimeout.count() / 1000);
    return kDefaultTimeout;
  }
  return milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

std::atomic<std::int64_t>& timeout_ms() {
  static std::atomic<std::int64_t> value{timeout_from_environment().count()};
  return value;
}

thread_local const char* t_label = nullptr;

int world_rank() {
  if (Runtime::initialized()) return Runtime::get().rank();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

[[noreturn]] void expire(const CallSite& site, milliseconds timeout) {
  const std::string message = fmt::format(
      "watchdog: {} on group '{}' (group rank {} of {}, world rank {}) did not complete within {:g} s; a rank "
      "of the group skipped, reordered or never reached this call, or a peer stopped (WF_COMM_TIMEOUT sets the "
      "limit in seconds)",
      CallLabel::current_or(site.primitive), site.group, site.group_rank, site.group_size, world_rank(),
      static_cast<double>(timeout.count()) / 1000.0);
  if (Runtime::initialized()) Runtime::get().abort(message);
  std::fprintf(stderr, "wallfacer: error: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// MPI only progresses inside MPI calls, so the loop must keep testing; but with more ranks than
// cores a rank that spins steals the core its peer needs to reach the call. So: a short burst of
// yields for fast completions, then sleeps that grow with the wait.
void back_off(int spin, Clock::duration waited) {
  using std::chrono::microseconds;
  if (spin < 64) {
    std::this_thread::yield();
  } else if (waited < milliseconds(2)) {
    std::this_thread::sleep_for(microseconds(10));
  } else if (waited < milliseconds(100)) {
    std::this_thread::sleep_for(microseconds(100));
  } else {
    std::this_thread::sleep_for(milliseconds(1));
  }
}

}  // namespace

milliseconds watchdog_timeout() { return milliseconds(timeout_ms().load()); }

void set_watchdog_timeout(milliseconds timeout) {
  WF_CHECK(timeout.count() > 0, "set_watchdog_timeout({} ms): the timeout must be positive", timeout.count());
  timeout_ms() = timeout.count();
}

bool test_one(MPI_Request& request, MPI_Status& status, int& rc) {
  if (request == MPI_REQUEST_NULL) {
    rc = MPI_SUCCESS;
    return true;
  }
  int done = 0;
  rc = MPI_Test(&request, &done, &status);
  // On an error the request is finished as far as this rank can tell: MPI reports it once.
  if (rc != MPI_SUCCESS) {
    request = MPI_REQUEST_NULL;
    return true;
  }
  return done != 0;
}

int wait_all(std::span<MPI_Request> requests, std::span<MPI_Status> statuses, const CallSite& site) {
  const milliseconds timeout = watchdog_timeout();
  const Clock::time_point start = Clock::now();
  int first_error = MPI_SUCCESS;
  for (int spin = 0;; ++spin) {
    bool all_done = true;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int rc = MPI_SUCCESS;
      if (!test_one(requests[i], statuses[i], rc)) {
        all_done = false;
        continue;
      }
      // MPI leaves MPI_ERROR unset for single completions; callers read each request's outcome here.
      statuses[i].MPI_ERROR = rc;
      if (rc != MPI_SUCCESS && first_error == MPI_SUCCESS) first_error = rc;
    }
    if (all_done) return first_error;
    const Clock::duration waited = Clock::now() - start;
    if (waited > timeout) expire(site, timeout);
    back_off(spin, waited);
  }
}

CallLabel::CallLabel(const char* label) : previous_(t_label) { t_label = label; }
CallLabel::~CallLabel() { t_label = previous_; }
const char* CallLabel::current_or(const char* fallback) { return t_label != nullptr ? t_label : fallback; }

}  // namespace wf::comm
