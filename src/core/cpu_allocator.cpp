#include "src/core/cpu_allocator.h"

#include "wallfacer/core/machine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "src/core/address_sanitizer.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// The memory this process may use (machine_memory_bytes), shared by the ranks on this node when
// an MPI launcher says how many there are.
std::size_t memory_share() {
  const std::size_t total = machine_memory_bytes();
  for (const char* ranks_var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* env = std::getenv(ranks_var)) {
      const long ranks = std::strtol(env, nullptr, 10);
      if (ranks > 1) return total / static_cast<std::size_t>(ranks);
    }
  }
  return total;
}

// Half of this process's share of memory, or WF_CPU_CACHE_MB. (The cache is further held to
// twice the most bytes ever live at once, see release().)
std::size_t default_limit() {
  if (const char* env = std::getenv("WF_CPU_CACHE_MB")) {
    constexpr unsigned long long kMaxMb = std::numeric_limits<std::size_t>::max() >> 20;
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    WF_CHECK(*env >= '0' && *env <= '9' && *end == '\0' && mb <= kMaxMb,
             "WF_CPU_CACHE_MB must be a whole number of MiB up to {} (0 turns the cache off), got '{}'", kMaxMb, env);
    return static_cast<std::size_t>(mb) << 20;
  }
  if (kAddressSanitizerBuild) return 0;
  return memory_share() / 2;
}

class CachingAllocator {
 public:
  HostBlock allocate(std::size_t nbytes) {
    const std::size_t size = block_size(nbytes);
    if (size >= kMinCachedBytes) {
      std::lock_guard lock(mutex_);
      // The smallest cached block that fits, if it wastes at most 1/8 of itself.
      const auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first - it->first / 8 <= size) {
        const HostBlock block{it->second, it->first};
        cached_bytes_ -= it->first;
        free_.erase(it);
        ++hits_;
        count_live(block.size);
        return block;
      }
    }
    void* data = std::aligned_alloc(kTensorAlignment, size);
    if (data == nullptr) {
      empty();
      data = std::aligned_alloc(kTensorAlignment, size);
    }
    WF_CHECK(data != nullptr, "out of memory allocating {} bytes of host memory", nbytes);
    std::lock_guard lock(mutex_);
    count_live(size);
    return {data, size};
  }

  // Caches the block unless that would hold more than min(limit, 2 × the most bytes ever live):
  // a training step's blocks all fit (some are live at different times, hence the 2), while a run
  // whose sizes keep changing cannot pile up blocks it will never reuse.
  void release(HostBlock block) {
    std::lock_guard lock(mutex_);
    live_ -= block.size;
    const std::size_t cap = std::min(limit_, 2 * peak_live_);
    if (block.size >= kMinCachedBytes && block.size <= cap) {
      while (cached_bytes_ + block.size > cap) evict_largest();
      free_.emplace(block.size, block.data);
      cached_bytes_ += block.size;
      return;
    }
    std::free(block.data);
  }

  CpuCacheStats stats() {
    std::lock_guard lock(mutex_);
    return {static_cast<std::int64_t>(cached_bytes_), hits_};
  }

  void empty() {
    std::lock_guard lock(mutex_);
    while (!free_.empty()) evict_largest();
  }

  std::size_t limit() {
    std::lock_guard lock(mutex_);
    return limit_;
  }

  void set_limit(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    limit_ = bytes;
    while (cached_bytes_ > limit_) evict_largest();
  }

 private:
  // The block a request of nbytes gets: whole cache lines, as aligned_alloc requires a multiple
  // of the alignment; cached sizes are whole pages so that near sizes share blocks.
  static std::size_t block_size(std::size_t nbytes) {
    const std::size_t lines = round_up(nbytes, kTensorAlignment);
    return lines >= kMinCachedBytes ? round_up(lines, 4096) : lines;
  }

  void count_live(std::size_t size) {  // mutex_ held
    live_ += size;
    peak_live_ = std::max(peak_live_, live_);
  }

  void evict_largest() {  // mutex_ held
    const auto last = std::prev(free_.end());
    std::free(last->second);
    cached_bytes_ -= last->first;
    free_.erase(last);
  }

  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // block size -> block
  std::size_t cached_bytes_ = 0;
  std::size_t live_ = 0, peak_live_ = 0;  // bytes of blocks handed out now, and at most
  std::int64_t hits_ = 0;
  std::size_t limit_ = default_limit();
};

// Never destroyed: storages owned by static tensors may be released during static destruction.
CachingAllocator& allocator() {
  static auto* instance = new CachingAllocator();
  return *instance;
}

}  // namespace

HostBlock cpu_allocate(std::size_t nbytes) {
  const HostBlock block = allocator().allocate(nbytes);
  // Debugging aid: every new block filled with 0xFF bytes (NaN floats, -1 integers), so that code
  // reading memory it never wrote fails loudly instead of seeing zeros or stale values.
  static const bool poison = [] {
    const char* env = std::getenv("WF_CPU_ALLOC_POISON");
    return env != nullptr && std::string_view(env) == "1";
  }();
  if (poison) std::memset(block.data, 0xFF, nbytes);
  return block;
}
void cpu_release(HostBlock block) { allocator().release(block); }
CpuCacheStats cpu_cache_stats() { return allocator().stats(); }
void cpu_empty_cache() { allocator().empty(); }
std::size_t cpu_cache_limit() { return allocator().limit(); }
void set_cpu_cache_limit(std::size_t bytes) { allocator().set_limit(bytes); }

}  // namespace wf::detail
