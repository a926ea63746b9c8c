#include "src/core/test_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "src/core/host_backend.h"
#include "src/core/host_copy.h"
#include "src/core/test_device_streams.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

constexpr std::size_t kPage = 4096;

std::size_t arena_bytes() {
  std::size_t mb = 4096;
  if (const char* env = std::getenv("WF_TESTDEV_MB")) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(env, &end, 10);
    WF_CHECK(*env >= '1' && *env <= '9' && *end == '\0' && value <= (std::size_t{1} << 30),
             "WF_TESTDEV_MB must be a whole number of MiB from 1 to 2^30 (the test device's memory), got '{}'", env);
    mb = static_cast<std::size_t>(value);
  }
  return mb << 20;
}

// Address space reserved once, handed out in whole pages (first fit, freed neighbours merged).
// Pages [0, top_) have been handed out at some time; they are the ones access toggles.
class Arena {
 public:
  MemoryBlock allocate(std::size_t nbytes) {
    WF_CHECK(nbytes <= std::numeric_limits<std::size_t>::max() - kPage, "testdev: cannot allocate {} bytes", nbytes);
    const std::size_t size = (nbytes + kPage - 1) / kPage * kPage;
    std::lock_guard lock(mutex_);
    reserve();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const std::size_t offset = it->first, left = it->second - size;
      free_.erase(it);
      if (left > 0) free_.emplace(offset + size, left);
      return {base_ + offset, size};
    }
    WF_CHECK(size <= reserved_ - top_,
             "testdev: out of memory allocating {} bytes ({} of {} MiB in use); raise WF_TESTDEV_MB", nbytes,
             (top_ - free_bytes()) >> 20, reserved_ >> 20);
    const std::size_t offset = top_;
    top_ += size;
    if (depth_ > 0) protect(base_ + offset, size, PROT_READ | PROT_WRITE);
    return {base_ + offset, size};
  }

  void release(MemoryBlock block) {
    std::lock_guard lock(mutex_);
    std::size_t offset = static_cast<std::size_t>(static_cast<char*>(block.data) - base_), size = block.size;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      const auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_.emplace(offset, size);
  }

  void enter() {
    std::lock_guard lock(mutex_);
    if (depth_++ == 0 && top_ > 0) protect(base_, top_, PROT_READ | PROT_WRITE);
  }
  void leave() {
    std::lock_guard lock(mutex_);
    if (--depth_ == 0 && top_ > 0) protect(base_, top_, PROT_NONE);
  }

  bool contains(const void* p) {
    std::lock_guard lock(mutex_);
    const char* c = static_cast<const char*>(p);
    return base_ != nullptr && c >= base_ && c < base_ + reserved_;
  }

 private:
  void reserve() {  // mutex_ held
    if (base_ != nullptr) return;
    const std::size_t bytes = arena_bytes();
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    WF_CHECK(p != MAP_FAILED,
             "testdev: cannot reserve {} MiB of address space for its memory ({}); lower WF_TESTDEV_MB", bytes >> 20,
             std::strerror(errno));
    base_ = static_cast<char*>(p);
    reserved_ = bytes;
  }

  static void protect(char* begin, std::size_t bytes, int prot) {
    WF_CHECK(mprotect(begin, bytes, prot) == 0, "testdev: mprotect of {} bytes failed: {}", bytes,
             std::strerror(errno));
  }

  std::size_t free_bytes() const {
    std::size_t total = 0;
    for (const auto& [offset, size] : free_) total += size;
    return total;
  }

  std::mutex mutex_;
  char* base_ = nullptr;
  std::size_t reserved_ = 0, top_ = 0;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes of each free run below top_
  int depth_ = 0;                            // TestDeviceAccess scopes open now
};

Arena& arena() {
  static auto* instance = new Arena();  // never destroyed, like every backend
  return *instance;
}

class TestDeviceBackend final : public HostBackend {
 public:
  MemoryBlock allocate(Device, std::size_t nbytes) override {
    const MemoryBlock block = arena().allocate(nbytes);
    const TestDeviceAccess access;
    std::memset(block.data, 0xFF, block.size);
    return block;
  }
  void release(Device device, MemoryBlock block) override {
    // In stream order on the device's default stream, as the CUDA backend frees (cudaFreeAsync on
    // its main stream): a block is reused once the work queued there before the free has run. Work
    // on another stream that still uses a freed block is a bug this then shows (as on a GPU), where
    // draining every stream here would hide it, and hide a missing wait between two streams too.
    if (!test_device_async()) {
      arena().release(block);
      return;
    }
    // After the work queued so far on the thread's current stream, which may still use the block
    // (CUDA's backend joins that stream into its main stream before the free in the same way).
    const Stream user = Stream::current(device), main = Stream::default_for(device);
    if (!(user == main)) {
      const std::shared_ptr<void> used = test_event_create();
      test_event_record(used, user);
      test_stream_wait_event(main, used);
    }
    test_stream_run(main, [block] { arena().release(block); });
  }

  void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, const Stream& stream) override {
    // The caller may change the host memory once this returns (as with CUDA's pageable copies).
    // A capture keeps the bytes as they are now, for every replay (wallfacer/core/graph.h).
    const auto* bytes = static_cast<const unsigned char*>(host_src);
    test_stream_run(stream, [dst, source = std::vector<unsigned char>(bytes, bytes + nbytes)] {
      const TestDeviceAccess access;
      std::memcpy(dst, source.data(), source.size());
    });
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, const Stream& stream) override {
    test_stream_run(stream, [=] {
      const TestDeviceAccess access;
      std::memcpy(host_dst, src, nbytes);
    });
  }
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n,
               const Stream& stream) override {
    test_stream_run(stream, [=] {
      const TestDeviceAccess access;
      host_convert(src, src_dtype, dst, dst_dtype, n);
    });
  }
  void fill(void* dst, DType dtype, std::int64_t n, double value, const Stream& stream) override {
    test_stream_run(stream, [=] {
      const TestDeviceAccess access;
      host_fill(dst, dtype, n, value);
    });
  }

  bool supports_graphs() override { return true; }
  void begin_capture(const Stream& stream) override { test_stream_begin_capture(stream); }
  std::shared_ptr<void> end_capture(const Stream& stream) override { return test_stream_end_capture(stream); }
  void abort_capture(const Stream& stream) noexcept override { test_stream_abort_capture(stream); }
  void replay(const std::shared_ptr<void>& graph, const Stream& stream) override { test_stream_replay(graph, stream); }

  void synchronize(const Stream& stream) override { test_stream_synchronize(stream); }
  bool query(const Stream& stream) override { return test_stream_idle(stream); }
  void synchronize_device(Device) override { test_streams_synchronize_all(); }
  std::shared_ptr<void> create_event(Device) override { return test_event_create(); }
  void record(const std::shared_ptr<void>& event, const Stream& stream) override { test_event_record(event, stream); }
  void wait(const Stream& stream, const std::shared_ptr<void>& event) override {
    test_stream_wait_event(stream, event);
  }
  void synchronize_event(void* event) override { test_event_synchronize(event); }
  bool query_event(void* event) override { return test_event_query(event); }
};

}  // namespace

TestDeviceAccess::TestDeviceAccess() { arena().enter(); }
TestDeviceAccess::~TestDeviceAccess() { arena().leave(); }

bool is_test_device_memory(const void* p) { return arena().contains(p); }

DeviceBackend& test_device_backend() {
  static auto* instance = new TestDeviceBackend();
  return *instance;
}

}  // namespace wf::detail
