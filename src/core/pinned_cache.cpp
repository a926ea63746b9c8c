// detail::PinnedCache (pinned_cache.h): released page-locked blocks reused once their copies ran.
#include "src/core/pinned_cache.h"

#include <bit>
#include <cstdint>

namespace wf::detail {

std::size_t PinnedCache::size_class(std::size_t nbytes) {
  constexpr std::size_t kSmallest = 4096;
  if (nbytes <= kSmallest) return kSmallest;
  const std::size_t step = std::bit_floor(nbytes) / 4;  // >= 1024: keeps kTensorAlignment
  if (nbytes > SIZE_MAX - step) return nbytes;          // no class above: the request as it is
  return (nbytes + step - 1) / step * step;
}

bool PinnedCache::idle(const Block& block) {
  for (const Use& use : block.uses)
    if (!api_.completed(use.event)) return false;
  return true;
}

void PinnedCache::give_back(Block& block) {
  for (const Use& use : block.uses) {
    if (!api_.completed(use.event)) api_.synchronize(use.event);
    api_.destroy_event(use.event);
  }
  block.uses.clear();
  api_.free(block.data);
}

void PinnedCache::trim_to(std::size_t bytes) {
  while (cached_bytes_ > bytes && !cached_.empty()) {
    cached_bytes_ -= cached_.front().size;
    give_back(cached_.front());
    cached_.pop_front();
  }
}

MemoryBlock PinnedCache::allocate(std::size_t nbytes) {
  const std::size_t size = size_class(nbytes);
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    if (it->size != size || !idle(*it)) continue;
    const MemoryBlock block{it->data, it->size};
    cached_bytes_ -= it->size;
    live_.emplace(reinterpret_cast<std::uintptr_t>(it->data), std::move(*it));
    cached_.erase(it);
    ++hits_;
    return block;
  }
  void* data = api_.allocate(size);
  if (data == nullptr && !cached_.empty()) {
    // The host's page-locked memory is short: what the cache holds goes back first.
    trim_to(0);
    data = api_.allocate(size);
  }
  if (data == nullptr) return {};
  live_.emplace(reinterpret_cast<std::uintptr_t>(data), Block{data, size, {}});
  return {data, size};
}

void PinnedCache::release(void* data) noexcept {
  if (data == nullptr) return;
  try {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(data));
    if (it == live_.end()) return;  // not this cache's: nothing it may free
    cached_bytes_ += it->second.size;
    cached_.push_back(std::move(it->second));
    live_.erase(it);
    // Beyond the limit, the oldest blocks whose copies have run go back (no host wait here; the
    // rest go at a later release, or when an allocation finds the host short).
    for (auto c = cached_.begin(); c != cached_.end() && cached_bytes_ > limit_;) {
      if (!idle(*c)) {
        ++c;
        continue;
      }
      cached_bytes_ -= c->size;
      give_back(*c);
      c = cached_.erase(c);
    }
  } catch (...) {
    // At exit the device runtime may be gone: what is cached then is the process's to drop.
  }
}

void PinnedCache::used_by(const void* host, std::size_t nbytes, int device, std::uint64_t stream) {
  if (nbytes == 0) return;
  const auto address = reinterpret_cast<std::uintptr_t>(host);
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(address);
  if (it == live_.begin()) return;
  --it;
  Block& block = it->second;
  if (address - it->first >= block.size) return;  // pageable memory, or another allocator's
  for (const Use& use : block.uses) {
    if (use.device == device && use.stream == stream) {
      api_.record(use.event, device, stream);
      return;
    }
  }
  block.uses.push_back({device, stream, api_.record_new_event(device, stream)});
}

void PinnedCache::empty() {
  const std::lock_guard<std::mutex> lock(mutex_);
  trim_to(0);
}

std::size_t PinnedCache::cached_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

std::int64_t PinnedCache::hits() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

}  // namespace wf::detail
