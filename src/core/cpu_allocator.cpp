#include "src/core/cpu_allocator.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

bool address_sanitizer_build() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

// Half the machine's memory: the cache only ever holds blocks the process had live at once, so
// the limit matters only when block sizes keep changing (e.g. sampling with a growing context).
std::size_t default_limit() {
  if (const char* env = std::getenv("WF_CPU_CACHE_MB")) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    WF_CHECK(end != env && *end == '\0', "WF_CPU_CACHE_MB must be a whole number of MiB (0 turns the cache off), got '{}'",
             env);
    return static_cast<std::size_t>(mb) << 20;
  }
  if (address_sanitizer_build()) return 0;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 2
                               : std::size_t{1} << 30;
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
        return block;
      }
    }
    void* data = std::aligned_alloc(kTensorAlignment, size);
    if (data == nullptr) {
      empty();
      data = std::aligned_alloc(kTensorAlignment, size);
    }
    WF_CHECK(data != nullptr, "out of memory allocating {} bytes of host memory", nbytes);
    return {data, size};
  }

  void release(HostBlock block) {
    if (block.size >= kMinCachedBytes) {
      std::lock_guard lock(mutex_);
      if (block.size <= limit_) {
        while (cached_bytes_ + block.size > limit_) evict_largest();
        free_.emplace(block.size, block.data);
        cached_bytes_ += block.size;
        return;
      }
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

  void evict_largest() {  // mutex_ held
    const auto last = std::prev(free_.end());
    std::free(last->second);
    cached_bytes_ -= last->first;
    free_.erase(last);
  }

  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // block size -> block
  std::size_t cached_bytes_ = 0;
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
