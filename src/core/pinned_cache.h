#pragma once
// A cache of page-locked host blocks for a device backend whose pinned allocation is slow (CUDA's
// cudaHostAlloc maps and locks pages: milliseconds per call), which MPI's staging of device
// tensors asks for at every send and receive. A released block is kept by size class and handed
// out again only once every copy queued on it has run.
//
// The rule it relies on is none of the callers': a pinned block may be released while a copy
// that reads or writes it is still queued (a tensor's host copy dropped right after the
// asynchronous copy back to the device, a PinnedHostBuffer destroyed with its last copy in
// flight). The backend reports each copy it queues with host memory (`used_by`, after queuing
// it): when that memory lies in a live block of this cache, an event is recorded on the copy's
// stream for the block, one per stream (re-recorded by later copies on it). A released block is
// reused, or given back to the driver, only once all of its events have completed, so neither a
// new owner nor the driver gets it while the device still touches it. No host wait on the way.
//
// Free of any device API: the backend supplies the calls (PinnedHostApi), which lets
// tests/core/pinned_cache_test.cpp check the bookkeeping with fake events on the CPU.
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <vector>

#include "wallfacer/core/device_backend.h"

namespace wf::detail {

// The device calls the cache makes (under its lock).
class PinnedHostApi {
 public:
  virtual ~PinnedHostApi() = default;
  // nbytes of page-locked memory; nullptr when the host has none left (the error cleared).
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void free(void* data) = 0;
  // An event for `stream` of device `device`, recorded on it now (the block's copy is queued).
  virtual void* record_new_event(int device, std::uint64_t stream) = 0;
  virtual void record(void* event, int device, std::uint64_t stream) = 0;
  virtual bool completed(void* event) = 0;  // never waits
  virtual void synchronize(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
};

class PinnedCache {
 public:
  // `limit`: the bytes of released blocks kept for reuse; older ones beyond it go back to the driver.
  PinnedCache(PinnedHostApi& api, std::size_t limit) : api_(api), limit_(limit) {}
  PinnedCache(const PinnedCache&) = delete;
  PinnedCache& operator=(const PinnedCache&) = delete;

  // A block of at least nbytes (> 0); {nullptr, 0} when the host has no page-locked memory left
  // even after the cache gave back every block it could (waiting for their copies).
  MemoryBlock allocate(std::size_t nbytes);
  // `data` from allocate, whose copies may still be queued. Never throws.
  void release(void* data) noexcept;
  // A copy with host memory [host, host + nbytes) was queued on `stream` of `device`: when that
  // is a live block's, the block is not reused before the copy has run.
  void used_by(const void* host, std::size_t nbytes, int device, std::uint64_t stream);
  // Gives every cached block back to the driver, waiting for the copies still queued on them.
  void empty();

  std::size_t cached_bytes() const;  // released blocks kept for reuse
  std::int64_t hits() const;         // allocations served from them

  // The size a request of nbytes is served with: 4 KiB at least, then four classes per power of
  // two (at most a quarter more than asked), so released blocks fit later requests of about
  // their size.
  static std::size_t size_class(std::size_t nbytes);

 private:
  struct Use {
    int device;
    std::uint64_t stream;
    void* event;
  };
  struct Block {
    void* data = nullptr;
    std::size_t size = 0;
    std::vector<Use> uses;  // the last copy queued on each stream that used it
  };

  bool idle(const Block& block);  // every copy queued on it has run
  void give_back(Block& block);   // to the driver, after its copies (waits when one is queued)
  void trim_to(std::size_t bytes);

  PinnedHostApi& api_;
  std::size_t limit_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Block> live_;  // by address, for used_by's lookup of interior pointers
  std::list<Block> cached_;               // released, oldest first
  std::size_t cached_bytes_ = 0;
  std::int64_t hits_ = 0;
};

}  // namespace wf::detail
