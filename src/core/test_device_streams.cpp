#include "src/core/test_device_streams.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/graph.h"

namespace wf::detail {
namespace {

// WF_TESTDEV_ASYNC=<max delay in microseconds> starts a program with asynchronous streams (a
// training run's proof that its streams wait for each other: tests/train/device_parity_test.sh).
int async_delay_from_environment() {
  const char* env = std::getenv("WF_TESTDEV_ASYNC");
  if (env == nullptr || *env == '\0') return -1;
  char* end = nullptr;
  const long us = std::strtol(env, &end, 10);
  if (*end != '\0' || us < 0 || us > 1'000'000) {
    std::fprintf(stderr, "testdev: ignoring WF_TESTDEV_ASYNC='%s': expected a delay in microseconds from 0 to "
                         "1000000\n", env);
    return -1;
  }
  return static_cast<int>(us);
}
const int kEnvironmentDelay = async_delay_from_environment();

std::atomic<bool> g_async{kEnvironmentDelay >= 0};
std::atomic<int> g_max_delay_us{kEnvironmentDelay >= 0 ? kEnvironmentDelay : 200};

// One stream's work, run in order by its worker thread.
struct Queue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> tasks;
  bool running = false;  // a task has been taken and has not finished
  std::atomic<int> extra_delay_us{0};  // test_stream_slow_down: added before each task

  void push(std::function<void()> task) {
    {
      std::lock_guard lock(mutex);
      tasks.push_back(std::move(task));
    }
    changed.notify_all();
  }
  void drain() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return tasks.empty() && !running; });
  }
  bool idle() {
    std::lock_guard lock(mutex);
    return tasks.empty() && !running;
  }
  void work(unsigned seed) {
    std::mt19937 rng(seed);
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return !tasks.empty(); });
        task = std::move(tasks.front());
        tasks.pop_front();
        running = true;
      }
      const int max_delay = g_async.load() ? g_max_delay_us.load() : 0;  // an always-asynchronous stream: none
      const int delay = (max_delay > 0 ? static_cast<int>(rng() % (max_delay + 1)) : 0) + extra_delay_us.load();
      if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      try {
        task();
      } catch (const std::exception& e) {
        // A stream's work has nobody to report to: a failing task is a bug in the backend.
        std::fprintf(stderr, "testdev: a task on a stream failed: %s\n", e.what());
        std::abort();
      }
      {
        std::lock_guard lock(mutex);
        running = false;
      }
      changed.notify_all();
    }
  }
};

// The queues by (device index, stream handle); never destroyed, their workers never end.
class Queues {
 public:
  Queue& of(const Stream& stream) {
    std::lock_guard lock(mutex_);
    auto& queue = queues_[{stream.device().index, stream.handle()}];
    if (!queue) {
      queue = new Queue();
      std::thread(&Queue::work, queue, static_cast<unsigned>(stream.handle() * 7919 + 17)).detach();
    }
    return *queue;
  }
  void mark_asynchronous(const Stream& stream) {
    std::lock_guard lock(mutex_);
    asynchronous_.insert({stream.device().index, stream.handle()});
  }
  bool asynchronous(const Stream& stream) {
    std::lock_guard lock(mutex_);
    return asynchronous_.count({stream.device().index, stream.handle()}) != 0;
  }
  void drain_all() {
    std::vector<Queue*> all;
    {
      std::lock_guard lock(mutex_);
      for (auto& [key, queue] : queues_) all.push_back(queue);
    }
    for (Queue* queue : all) queue->drain();
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, std::uint64_t>, Queue*> queues_;
  std::set<std::pair<int, std::uint64_t>> asynchronous_;  // test_stream_make_asynchronous
};
Queues& queues() {
  static auto* instance = new Queues();
  return *instance;
}

// An event: record n completes when the stream reaches its marker; waits compare counts.
struct EventState {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0, completed = 0;

  void complete(std::uint64_t n) {
    {
      std::lock_guard lock(mutex);
      if (n > completed) completed = n;
    }
    changed.notify_all();
  }
  void wait_for(std::uint64_t n) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return completed >= n; });
  }
};

EventState& state(void* event) { return *static_cast<EventState*>(event); }

}  // namespace

void set_test_device_async(bool on, int max_delay_us) {
  queues().drain_all();
  g_max_delay_us.store(max_delay_us);
  g_async.store(on);
}
bool test_device_async() { return g_async.load(); }

namespace {
bool runs_asynchronously(const Stream& stream) { return g_async.load() || queues().asynchronous(stream); }
}  // namespace

void test_stream_make_asynchronous(const Stream& stream) { queues().mark_asynchronous(stream); }

namespace {
// The captures in progress: the recording of each capturing stream, and the thread capturing it.
struct Recording {
  std::thread::id thread;
  std::shared_ptr<std::vector<std::function<void()>>> tasks;
};
std::mutex g_capture_mutex;
std::map<std::pair<int, std::uint64_t>, Recording> g_recordings;
std::atomic<int> g_capturing{0};

// True when the task was recorded (not to be run now); throws for another stream of a device
// the calling thread is capturing on.
bool recorded(const Stream& stream, std::function<void()>& task) {
  std::lock_guard lock(g_capture_mutex);
  const auto it = g_recordings.find({stream.device().index, stream.handle()});
  if (it != g_recordings.end()) {
    it->second.tasks->push_back(std::move(task));
    return true;
  }
  if (stream.handle() == 0) return false;
  for (const auto& [key, recording] : g_recordings) {
    if (key.first == stream.device().index && recording.thread == std::this_thread::get_id()) {
      throw GraphCaptureError(fmt::format(
          "the captured work queued work on {}'s stream {} while capturing stream {}: a graph records one stream's "
          "work; queue it on the capture stream",
          stream.device().str(), stream.handle(), key.second));
    }
  }
  return false;
}
}  // namespace

void test_stream_begin_capture(const Stream& stream) {
  // What was queued before stays in the stream's queue, ahead of every replay: like CUDA, the
  // capture does not wait for it.
  std::lock_guard lock(g_capture_mutex);
  const auto [it, inserted] = g_recordings.emplace(
      std::pair{stream.device().index, stream.handle()},
      Recording{std::this_thread::get_id(), std::make_shared<std::vector<std::function<void()>>>()});
  WF_CHECK(inserted, "testdev: stream {} of {} is capturing already", stream.handle(), stream.device().str());
  g_capturing.fetch_add(1);
}

std::shared_ptr<void> test_stream_end_capture(const Stream& stream) {
  std::lock_guard lock(g_capture_mutex);
  const auto it = g_recordings.find({stream.device().index, stream.handle()});
  WF_CHECK(it != g_recordings.end(), "testdev: stream {} of {} is not capturing", stream.handle(), stream.device().str());
  std::shared_ptr<void> graph = std::move(it->second.tasks);
  g_recordings.erase(it);
  g_capturing.fetch_sub(1);
  return graph;
}

void test_stream_abort_capture(const Stream& stream) noexcept {
  std::lock_guard lock(g_capture_mutex);
  if (g_recordings.erase({stream.device().index, stream.handle()}) > 0) g_capturing.fetch_sub(1);
}

void test_stream_replay(const std::shared_ptr<void>& graph, const Stream& stream) {
  WF_CHECK(graph != nullptr, "testdev: replay of an empty graph");
  for (const std::function<void()>& task : *std::static_pointer_cast<std::vector<std::function<void()>>>(graph)) {
    test_stream_run(stream, task);  // a copy: the graph keeps its tasks for the next replay
  }
}

void test_stream_run(const Stream& stream, std::function<void()> task) {
  if (g_capturing.load(std::memory_order_relaxed) > 0 && recorded(stream, task)) return;
  if (runs_asynchronously(stream)) {
    queues().of(stream).push(std::move(task));
  } else {
    task();
  }
}

void test_stream_synchronize(const Stream& stream) {
  if (runs_asynchronously(stream)) queues().of(stream).drain();
}
bool test_stream_idle(const Stream& stream) { return !runs_asynchronously(stream) || queues().of(stream).idle(); }
void test_streams_synchronize_all() { queues().drain_all(); }

void test_stream_stall(const Stream& stream, int ms) {
  test_stream_run(stream, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

void test_stream_slow_down(const Stream& stream, int us) { queues().of(stream).extra_delay_us.store(us); }

std::shared_ptr<void> test_event_create() { return std::make_shared<EventState>(); }

void test_event_record(const std::shared_ptr<void>& event, const Stream& stream) {
  auto e = std::static_pointer_cast<EventState>(event);
  std::uint64_t n = 0;
  {
    std::lock_guard lock(e->mutex);
    n = ++e->recorded;
  }
  test_stream_run(stream, [e, n] { e->complete(n); });
}

void test_stream_wait_event(const Stream& stream, const std::shared_ptr<void>& event) {
  auto e = std::static_pointer_cast<EventState>(event);
  std::uint64_t n = 0;
  {
    std::lock_guard lock(e->mutex);
    n = e->recorded;
  }
  test_stream_run(stream, [e, n] { e->wait_for(n); });
}

void test_event_synchronize(void* event) {
  EventState& e = state(event);
  std::uint64_t n = 0;
  {
    std::lock_guard lock(e.mutex);
    n = e.recorded;
  }
  e.wait_for(n);
}

bool test_event_query(void* event) {
  EventState& e = state(event);
  std::lock_guard lock(e.mutex);
  return e.completed >= e.recorded;
}

}  // namespace wf::detail
