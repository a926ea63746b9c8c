#include "wallfacer/core/stream.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "src/core/graph_capture.h"
#include "wallfacer/core/device_backend.h"

namespace wf {
namespace {

std::atomic<std::int64_t> g_host_syncs{0};

// This thread's current streams that are not their device's default (set by StreamGuard).
std::vector<Stream>& current_streams() {
  thread_local std::vector<Stream> streams;
  return streams;
}

void set_current(const Stream& stream) {
  auto& streams = current_streams();
  const auto it = std::find_if(streams.begin(), streams.end(),
                               [&](const Stream& s) { return s.device() == stream.device(); });
  if (it != streams.end()) streams.erase(it);
  if (stream.handle() != 0) streams.push_back(stream);
}

}  // namespace

namespace detail {
namespace {
std::atomic<std::int64_t> g_staging_syncs{0};
thread_local int t_staging_depth = 0;
}  // namespace

void count_host_sync() {
  refuse_host_wait_in_capture("a synchronize, a copy to the host or item()");
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
  if (t_staging_depth > 0) g_staging_syncs.fetch_add(1, std::memory_order_relaxed);
}
StagingScope::StagingScope() { ++t_staging_depth; }
StagingScope::~StagingScope() { --t_staging_depth; }
}  // namespace detail

std::int64_t host_sync_count() { return g_host_syncs.load(std::memory_order_relaxed); }
std::int64_t staging_sync_count() { return detail::g_staging_syncs.load(std::memory_order_relaxed); }

// ---- Stream -------------------------------------------------------------------------------------
Stream Stream::create(Device device) { return device_backend(device).create_stream(device); }

Stream Stream::current(Device device) {
  for (const Stream& s : current_streams())
    if (s.device() == device) return s;
  return default_for(device);
}

void Stream::synchronize() const {
  detail::count_host_sync();
  device_backend(device_).synchronize(*this);
}

bool Stream::query() const { return device_backend(device_).query(*this); }

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;
  detail::refuse_event_in_capture(*this, "waits for an event");
  if (event.device().type == device_.type) {
    device_backend(device_).wait(*this, event.shared_handle());
  } else if (!event.query()) {
    // Another backend's event cannot be queued here: the host waits for it instead.
    event.synchronize();
  }
}

// ---- Event --------------------------------------------------------------------------------------
void Event::record(const Stream& stream) {
  detail::refuse_event_in_capture(stream, "records an event");
  DeviceBackend& backend = device_backend(stream.device());
  if (!recorded_ || device_ != stream.device()) handle_ = backend.create_event(stream.device());
  device_ = stream.device();
  recorded_ = true;
  backend.record(handle_, stream);
}

bool Event::query() const { return !recorded_ || device_backend(device_).query_event(handle_.get()); }

void Event::synchronize() const {
  if (!recorded_) return;
  detail::count_host_sync();
  device_backend(device_).synchronize_event(handle_.get());
}

// ---- StreamGuard --------------------------------------------------------------------------------
StreamGuard::StreamGuard(const Stream& stream) : previous_(Stream::current(stream.device())) { set_current(stream); }
StreamGuard::~StreamGuard() { set_current(previous_); }

void synchronize(Device device) {
  detail::count_host_sync();
  device_backend(device).synchronize_device(device);
}

}  // namespace wf
