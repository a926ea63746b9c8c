#include "src/comm/progress.h"

#include <condition_variable>
#include <cstdlib>
#include <thread>
#include <vector>

#include "src/comm/watchdog.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::comm {
namespace {

ProgressMode mode_from_environment() {
  const char* env = std::getenv("WF_COMM_PROGRESS");
  if (env == nullptr || *env == '\0') return ProgressMode::thread;
  try {
    return parse_progress_mode(env);
  } catch (const Error& e) {
    log::warn("ignoring WF_COMM_PROGRESS: {}; using thread", e.what());
    return ProgressMode::thread;
  }
}

std::atomic<ProgressMode>& mode_state() {
  static std::atomic<ProgressMode> mode{mode_from_environment()};
  return mode;
}

// The one progress thread of this process. Leaked on purpose: it is stopped by MPI_Finalize
// (stop_at_finalize below), and static destructors may run after that or before it.
class ProgressThread {
 public:
  static ProgressThread& instance() {
    static ProgressThread* thread = new ProgressThread();
    return *thread;
  }

  void track(std::shared_ptr<PendingOperation> operation) {
    std::lock_guard lock(mutex_);
    if (stopped_ || !start_locked()) return;
    operations_.push_back(std::move(operation));
    wake_.notify_one();
  }

  int tracked() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(operations_.size());
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
      operations_.clear();
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  ProgressThread() = default;

  // Starts the thread on first use; false when MPI cannot run it (no MPI_THREAD_MULTIPLE).
  bool start_locked() {
    if (thread_.joinable()) return true;
    if (unavailable_) return false;
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      unavailable_ = true;
      log::warn("WF_COMM_PROGRESS=thread needs MPI_THREAD_MULTIPLE (this MPI provides level {}): non-blocking "
                "P2P progresses only inside MPI calls",
                provided);
      return false;
    }
    int keyval = MPI_KEYVAL_INVALID;
    check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &stop_at_finalize, &keyval, nullptr),
              "progress thread: MPI_Comm_create_keyval");
    check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "progress thread: MPI_Comm_set_attr(MPI_COMM_SELF)");
    thread_ = std::thread([this] { run(); });
    return true;
  }

  // MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else: the thread leaves
  // its loop and is joined while MPI still works.
  static int stop_at_finalize(MPI_Comm, int, void*, void*) {
    instance().stop();
    return MPI_SUCCESS;
  }

  void run() {
    std::vector<std::shared_ptr<PendingOperation>> batch;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopped_ || !operations_.empty(); });
      if (stopped_) return;
      batch = operations_;
      lock.unlock();
      for (const auto& operation : batch) {
        // An owner holding the lock is testing or waiting itself: nothing to add.
        std::unique_lock owned(operation->mutex, std::try_to_lock);
        if (owned.owns_lock() && !operation->complete.load(std::memory_order_acquire)) operation->test_all();
      }
      batch.clear();
      lock.lock();
      std::erase_if(operations_, [](const auto& op) { return op->complete.load(std::memory_order_acquire); });
      if (!operations_.empty()) wake_.wait_for(lock, kProgressInterval, [&] { return stopped_; });
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<PendingOperation>> operations_;
  std::thread thread_;
  bool stopped_ = false, unavailable_ = false;
};

}  // namespace

const char* progress_mode_name(ProgressMode mode) { return mode == ProgressMode::thread ? "thread" : "off"; }

ProgressMode parse_progress_mode(std::string_view text) {
  if (text == "thread") return ProgressMode::thread;
  if (text == "off") return ProgressMode::off;
  WF_FAIL("unknown communication progress mode '{}': expected 'thread' (a progress thread completes non-blocking "
          "P2P while the caller computes) or 'off'",
          text);
}

ProgressMode progress_mode() { return mode_state().load(std::memory_order_relaxed); }
void set_progress_mode(ProgressMode mode) { mode_state() = mode; }

bool test_pending(std::span<MPI_Request> requests, std::span<MPI_Status> statuses) {
  bool all_done = true;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    int rc = MPI_SUCCESS;
    if (test_one(requests[i], statuses[i], rc)) {
      statuses[i].MPI_ERROR = rc;  // MPI leaves it unset for single completions
    } else {
      all_done = false;
    }
  }
  return all_done;
}

bool PendingOperation::test_all() {
  const bool all_done = test_pending(pending(), outcomes());
  if (all_done) complete.store(true, std::memory_order_release);
  return all_done;
}

int wait_busy_then_back_off(std::span<MPI_Request> requests, std::span<MPI_Status> statuses, const CallSite& site) {
  const auto start = std::chrono::steady_clock::now();
  for (int spin = 1; !test_pending(requests, statuses); ++spin) {
    if (spin % 64 == 0 && std::chrono::steady_clock::now() - start >= kBusyWait) {
      wait_all(requests, statuses, site);
      break;
    }
    std::this_thread::yield();
  }
  for (const MPI_Status& status : statuses) {
    if (status.MPI_ERROR != MPI_SUCCESS) return status.MPI_ERROR;
  }
  return MPI_SUCCESS;
}

void track_for_progress(std::shared_ptr<PendingOperation> operation) {
  if (progress_mode() != ProgressMode::thread) return;
  ProgressThread::instance().track(std::move(operation));
}

int progress_tracked_count() { return ProgressThread::instance().tracked(); }

}  // namespace wf::comm
