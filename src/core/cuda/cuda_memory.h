#pragma once
// The CUDA backend's memory (cuda_memory.cpp): a stream-ordered caching allocator over each
// device's pool (cudaMallocFromPoolAsync / cudaFreeAsync on the device's main stream, the pool's
// release threshold keeping freed memory reserved for reuse), and page-locked host memory.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "wallfacer/core/device_backend.h"

namespace wf::detail {

// A block of at least nbytes (> 0) on `device`, allocated in its main stream's order and usable
// on `user` (a stream of the device that waits for the main stream when it is another one).
// wf::Error naming the request, the memory in use and the fixes when the device is out of memory.
MemoryBlock cuda_allocate(Device device, std::size_t nbytes, const Stream& user);
// Frees `block` in the main stream's order after the work queued so far on `user` (the stream
// that used it last). Never throws: a failure (at exit, after CUDA unloaded) leaks the block.
void cuda_release(Device device, MemoryBlock block, const Stream& user) noexcept;

DeviceBackend::CacheStats cuda_cache_stats();
void cuda_empty_cache();

// Page-locked host memory (cudaHostAllocPortable), cached: a released block is kept by size class
// (src/core/pinned_cache.h) and handed out again once the copies queued on it have run.
MemoryBlock cuda_allocate_pinned(std::size_t nbytes);
void cuda_release_pinned(MemoryBlock block) noexcept;
// After each cudaMemcpyAsync with host memory queued on `stream` (`native`): when `host` is in a
// cached pinned block, the block is not reused before the copy has run.
void cuda_pinned_used_by(const void* host, std::size_t nbytes, const Stream& stream, cudaStream_t native);

}  // namespace wf::detail
