#include "src/comm/watchdog.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
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

std::string expiry_message(const CallSite& site, milliseconds timeout) {
  return fmt::format(
      "watchdog: {} on group '{}' (group rank {} of {}, world rank {}) did not complete within {:g} s; a rank "
      "of the group skipped, reordered or never reached this call, or a peer stopped (WF_COMM_TIMEOUT sets the "
      "limit in seconds)",
      CallLabel::current_or(site.primitive), site.group, site.group_rank, site.group_size, world_rank(),
      static_cast<double>(timeout.count()) / 1000.0);
}

[[noreturn]] void abort_job(const std::string& message) {
  if (Runtime::initialized()) Runtime::get().abort(message);
  std::fprintf(stderr, "wallfacer: error: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

[[noreturn]] void expire(const CallSite& site, milliseconds timeout) { abort_job(expiry_message(site, timeout)); }

// The blocking calls in flight (one per calling thread at most) and the thread that watches
// their deadlines. A call only registers and deregisters under a mutex: it never wakes the
// thread, which looks every kMonitorPeriod on its own (waking it per call cost a context switch
// per collective, measurable at 1 MiB on two busy cores).
class Monitor {
 public:
  static Monitor& instance() {
    static Monitor* monitor = new Monitor();  // never destroyed: the thread may outlive main's statics
    return *monitor;
  }

  std::uint64_t enter(std::string message_if_late, Clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_id_++;
    calls_.emplace(id, Call{std::move(message_if_late), deadline});
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
    return id;
  }

  void leave(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    calls_.erase(id);
  }

 private:
  struct Call {
    std::string message;
    Clock::time_point deadline;
  };

  Monitor() = default;

  static constexpr milliseconds kMonitorPeriod{100};

  void watch() {
    std::unique_lock lock(mutex_);
    for (;;) {
      for (const auto& [id, call] : calls_) {
        if (Clock::now() > call.deadline) abort_job(call.message);
      }
      wake_.wait_for(lock, kMonitorPeriod);  // nobody notifies: a timed sleep that releases the lock
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint64_t, Call> calls_;
  std::uint64_t next_id_ = 0;
  std::thread thread_;
};

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

void wait_until(const CallSite& site, const std::function<bool()>& done, const std::function<void()>& before_abort) {
  const milliseconds timeout = watchdog_timeout();
  const Clock::time_point start = Clock::now();
  for (int spin = 0; !done(); ++spin) {
    const Clock::duration waited = Clock::now() - start;
    if (waited > timeout) {
      if (before_abort) before_abort();
      expire(site, timeout);
    }
    back_off(spin, waited);
  }
}

int run_watched(const CallSite& site, const std::function<int()>& call) {
  const milliseconds timeout = watchdog_timeout();
  // The message is made now: the call label is this thread's, and the site refers to the caller.
  Monitor& monitor = Monitor::instance();
  const std::uint64_t id = monitor.enter(expiry_message(site, timeout), Clock::now() + timeout);
  const int rc = call();
  monitor.leave(id);
  return rc;
}

CallLabel::CallLabel(const char* label) : previous_(t_label) { t_label = label; }
CallLabel::~CallLabel() { t_label = previous_; }
const char* CallLabel::current_or(const char* fallback) { return t_label != nullptr ? t_label : fallback; }

}  // namespace wf::comm
