// Device graphs (wallfacer/core/graph.h): the capture's pool of memory, the checks made while
// capturing, and capture / replay through the device's backend.
#include "wallfacer/core/graph.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/core/graph_capture.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/rng.h"

namespace wf {
namespace detail {
namespace {

// A graph's memory: blocks from the backend's graph memory, handed out during its capture (a
// block freed meanwhile goes to a later allocation it fits, the smallest such block, unless it is
// larger than twice the request plus 128 KiB) and kept until the graph and every tensor allocated
// in it are gone. Only its capture allocates from it: once that ends nothing more is handed out,
// since its replays write every block it ever handed out.
struct GraphPool {
  GraphPool(Device d, DeviceBackend& b) : device(d), backend(&b) {}
  ~GraphPool() {
    for (const MemoryBlock& block : adopted) backend->release(device, block);
    for (const MemoryBlock& block : blocks) backend->release_graph_memory(device, block);
    for (const MemoryBlock& block : host) backend->release_pinned(block);
  }
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  MemoryBlock take(std::size_t nbytes) {
    const auto it = free.lower_bound(nbytes);
    // A small tensor does not take a large freed block: the next large one would need new memory.
    constexpr std::size_t kSlack = std::size_t{128} << 10;
    if (it != free.end() && it->first <= 2 * nbytes + kSlack) {
      const MemoryBlock block = it->second;
      free.erase(it);
      return block;
    }
    const MemoryBlock block = backend->allocate_graph_memory(device, nbytes);
    blocks.push_back(block);
    reserved += block.size;
    return block;
  }

  Device device;
  DeviceBackend* backend;
  std::multimap<std::size_t, MemoryBlock> free;  // by size
  std::vector<MemoryBlock> blocks;               // every block it has
  std::vector<MemoryBlock> host;                 // pinned blocks holding kept host bytes
  std::vector<MemoryBlock> adopted;              // the allocator's blocks freed while capturing
  std::size_t reserved = 0;
};

// The blocks of every live pool that a tensor holds now, by address, with their pool.
struct InUse {
  std::mutex mutex;
  std::unordered_map<void*, std::shared_ptr<GraphPool>> blocks;
  std::atomic<std::int64_t> count{0};
};
InUse& in_use() {
  static auto* instance = new InUse();  // never destroyed: tensors may be freed at exit
  return *instance;
}

struct Capture {
  Stream stream;
  std::shared_ptr<GraphPool> pool;
};
thread_local Capture* t_capture = nullptr;

// The capture this thread makes on `device`; null when it captures nothing there.
Capture* capture_on(Device device) {
  return t_capture != nullptr && t_capture->stream.device() == device ? t_capture : nullptr;
}

// While it lives, this thread captures on `capture.stream`.
class CaptureScope {
 public:
  explicit CaptureScope(Capture& capture) {
    WF_CHECK(t_capture == nullptr, "DeviceGraph::capture: this thread is already capturing on {} (captures do not nest)",
             t_capture->stream.device().str());
    t_capture = &capture;
  }
  ~CaptureScope() { t_capture = nullptr; }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
};

// The process's random streams, to tell whether the captured work drew from them.
struct RngStates {
  Generator::State replicated;
  GeneratorTracker::States named;

  static RngStates now() { return {default_generator().state(), generator_tracker().states()}; }
  void restore() const {
    default_generator().set_state(replicated);
    generator_tracker().set_states(named);
  }
  friend bool operator==(const RngStates&, const RngStates&) = default;
};

// A block of the allocator freed while this thread captures on its device: work recorded before
// the free may read it at every replay (an input the caller dropped, a cache replaced), so the
// graph keeps it. Freeing it in the allocator's stream order would also order the allocator's
// stream after the capture stream, which CUDA would pull into the capture.
bool adopt(Device device, MemoryBlock block) {
  Capture* capture = capture_on(device);
  if (capture == nullptr) [[likely]] return false;
  capture->pool->adopted.push_back(block);
  return true;
}

}  // namespace

bool capturing(Device device) { return capture_on(device) != nullptr; }

std::optional<MemoryBlock> capture_allocate(Device device, std::size_t nbytes) {
  Capture* capture = capture_on(device);
  if (capture == nullptr) [[likely]] return std::nullopt;
  const MemoryBlock block = capture->pool->take(nbytes);
  InUse& blocks = in_use();
  std::lock_guard lock(blocks.mutex);
  blocks.blocks.emplace(block.data, capture->pool);
  blocks.count.fetch_add(1, std::memory_order_relaxed);
  return block;
}

bool capture_release(Device device, MemoryBlock block) {
  InUse& blocks = in_use();
  if (blocks.count.load(std::memory_order_relaxed) == 0) [[likely]] return adopt(device, block);
  std::shared_ptr<GraphPool> pool;  // dropped after the lock: the last reference frees the pool
  {
    std::lock_guard lock(blocks.mutex);
    const auto it = blocks.blocks.find(block.data);
    if (it == blocks.blocks.end()) return adopt(device, block);
    pool = std::move(it->second);
    blocks.blocks.erase(it);
    blocks.count.fetch_sub(1, std::memory_order_relaxed);
    pool->free.emplace(block.size, block);
  }
  return true;
}

const void* capture_keep_host_bytes(Device device, const void* host_src, std::size_t nbytes) {
  Capture* capture = capture_on(device);
  WF_CHECK(capture != nullptr, "capture_keep_host_bytes: this thread is not capturing on {}", device.str());
  GraphPool& pool = *capture->pool;
  const MemoryBlock block = pool.backend->allocate_pinned(nbytes);
  pool.host.push_back(block);
  std::memcpy(block.data, host_src, nbytes);
  return block.data;
}

void refuse_host_wait_in_capture(const char* what) {
  if (t_capture == nullptr) [[likely]] return;
  throw GraphCaptureError(fmt::format(
      "the captured work waits for {} on the host ({}): a graph cannot record a host wait, and its replays would not "
      "make it; move the read after the replay",
      t_capture->stream.device().str(), what));
}

void refuse_event_in_capture(const Stream& stream, const char* what) {
  if (t_capture == nullptr || !(t_capture->stream == stream)) [[likely]] return;
  throw GraphCaptureError(fmt::format("the captured work {} on the capture stream of {}: ordering the capture against "
                                      "other streams is not recorded; queue the captured work on one stream",
                                      what, stream.device().str()));
}

}  // namespace detail

struct DeviceGraph::State {
  Stream stream;
  std::shared_ptr<detail::GraphPool> pool;  // declared first: freed after the executable graph
  std::shared_ptr<void> executable;
  std::int64_t replays = 0;

  ~State() {
    // The pool's memory is freed once no replay still uses it. Not a host wait of the step's
    // (it is not counted): a graph is dropped when its run ends.
    try {
      device_backend(stream.device()).synchronize(stream);
    } catch (...) {
      // At exit the device may be gone already; nothing is left to wait for then.
    }
  }
};

bool graphs_supported(Device device) {
  DeviceBackend* backend = find_device_backend(device.type);
  return backend != nullptr && backend->supports_graphs();
}

DeviceGraph DeviceGraph::capture(const Stream& stream, const std::function<void()>& work) {
  const Device device = stream.device();
  WF_CHECK(stream.handle() != 0,
           "DeviceGraph::capture: {}'s default stream cannot be captured (its allocator orders frees on it); capture "
           "on a stream of Stream::create",
           device.str());
  DeviceBackend& backend = device_backend(device);  // begin_capture refuses where it records no graphs
  detail::Capture capture{stream, std::make_shared<detail::GraphPool>(device, backend)};
  const detail::RngStates rng_before = detail::RngStates::now();
  std::shared_ptr<void> executable;
  {
    const detail::CaptureScope scope(capture);
    const StreamGuard guard(stream);
    backend.begin_capture(stream);
    try {
      work();
    } catch (...) {
      backend.abort_capture(stream);
      rng_before.restore();
      try {
        throw;
      } catch (const GraphCaptureError&) {
        throw;
      } catch (const Error& e) {
        // A device library's call that a graph cannot record fails inside the capture, not as a
        // capture error of ours: the same error without a graph shows whether it is the graph's.
        throw GraphCaptureError(fmt::format("capturing on {} failed: {}", device.str(), e.what()));
      }
    }
    executable = backend.end_capture(stream);
  }
  if (detail::RngStates::now() != rng_before) {
    rng_before.restore();
    throw GraphCaptureError(
        "the captured work draws random numbers (dropout, or noise drawn on the device): every replay would repeat "
        "the capture's draws; run it without a graph, or without dropout");
  }
  DeviceGraph graph;
  graph.state_ = std::make_shared<State>();
  graph.state_->stream = stream;
  graph.state_->executable = std::move(executable);
  graph.state_->pool = std::move(capture.pool);
  return graph;
}

void DeviceGraph::replay() const {
  WF_CHECK(state_ != nullptr, "DeviceGraph::replay: the graph is empty (capture one first)");
  device_backend(state_->stream.device()).replay(state_->executable, state_->stream);
  state_->replays += 1;
}

std::size_t DeviceGraph::pool_bytes() const { return state_ == nullptr ? 0 : state_->pool->reserved; }

std::int64_t DeviceGraph::replays() const { return state_ == nullptr ? 0 : state_->replays; }

}  // namespace wf
