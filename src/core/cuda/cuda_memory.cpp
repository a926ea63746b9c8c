// The CUDA backend's memory: see cuda_memory.h and src/core/cuda/cuda_device.h (the main-stream
// rule). The pool's allocator is the cache: with the release threshold at UINT64_MAX a freed
// block stays reserved by the pool (not returned to the driver at the next synchronisation) and a
// later cudaMallocFromPoolAsync on the main stream reuses it at once, in stream order. Pinned
// host blocks are cached by src/core/pinned_cache.h, which reuses one only after its copies ran.
#include "src/core/cuda/cuda_memory.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>

#include "src/core/cpu_allocator.h"
#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/cuda/cuda_devices.h"
#include "src/core/pinned_cache.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

// Blocks are whole multiples of this; the pool's blocks start on such a boundary (CUDA's
// allocations are 256-byte aligned), which covers kTensorAlignment's vector loads.
constexpr std::size_t kBlockAlignment = 256;
static_assert(kBlockAlignment % kTensorAlignment == 0);

std::atomic<std::int64_t> g_cache_hits{0};

PinnedCache& pinned_cache();  // the cache of page-locked host blocks (at the end of this file)

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  std::uint64_t value = 0;
  WF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(std::uint64_t{1} << 30); }

[[noreturn]] void fail_out_of_memory(const CudaDeviceState& s, std::size_t nbytes) {
  const std::uint64_t used = pool_attribute(s.pool, cudaMemPoolAttrUsedMemCurrent);
  const std::uint64_t reserved = pool_attribute(s.pool, cudaMemPoolAttrReservedMemCurrent);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();  // the message says 0 then
  WF_FAIL("cuda:{}: out of memory allocating {} bytes ({:.2f} GiB): this process has {:.2f} GiB in use and {:.2f} GiB "
          "reserved by its allocator; the GPU has {:.2f} GiB free of {:.2f} GiB. To need less: a smaller "
          "train.micro_batch_size (with train.global_batch_size kept, the step's batch is unchanged), activation "
          "checkpointing (model.checkpoint_attention: true), or more sequence or tensor parallelism (parallel.sp, "
          "parallel.tp) to split each GPU's activations and weights",
          s.index, nbytes, gib(nbytes), gib(used), gib(reserved), gib(free), gib(total));
}

// cudaMallocFromPoolAsync on the main stream; nullptr when the device is out of memory (the
// error cleared), wf::Error for any other failure.
void* allocate_in_pool(const CudaDeviceState& s, std::size_t size) {
  void* data = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&data, size, s.pool, s.main);
  if (status == cudaSuccess) return data;
  // Not sticky: cleared, so that no later check reports it again. A request beyond the whole
  // GPU may be refused as an invalid size rather than as out of memory: it is one all the same.
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation || size > s.total_memory) return nullptr;
  throw_cuda_error(status, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
}

}  // namespace

MemoryBlock cuda_allocate(Device device, std::size_t nbytes, const Stream& user) {
  CudaDeviceState& s = cuda_device_state(device);
  WF_CHECK(nbytes <= SIZE_MAX - kBlockAlignment, "cuda:{}: cannot allocate {} bytes", device.index, nbytes);
  const std::size_t size = (nbytes + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  // A hit is an allocation the pool served without reserving more from the driver (an estimate
  // when other threads allocate on the device at the same time).
  const std::uint64_t reserved_before = pool_attribute(s.pool, cudaMemPoolAttrReservedMemCurrent);
  void* data = allocate_in_pool(s, size);
  if (data == nullptr) {
    // Before giving up: let the frees still queued behind running work complete and hand what
    // the pool holds back to the driver, so the request can be mapped afresh (a fragmented pool
    // may hold enough bytes but no block that fits). One host wait, on this failing path only.
    WF_CUDA_CHECK(cudaStreamSynchronize(s.main));
    WF_CUDA_CHECK(cudaMemPoolTrimTo(s.pool, 0));
    data = allocate_in_pool(s, size);
    if (data == nullptr) fail_out_of_memory(s, nbytes);
  }
  if (pool_attribute(s.pool, cudaMemPoolAttrReservedMemCurrent) <= reserved_before)
    g_cache_hits.fetch_add(1, std::memory_order_relaxed);
  if (reinterpret_cast<std::uintptr_t>(data) % kTensorAlignment != 0) {
    cudaFreeAsync(data, s.main);
    WF_FAIL("cuda:{}: the memory pool returned {} for {} bytes, not {}-byte aligned", device.index, data, nbytes,
            kTensorAlignment);
  }
  // The allocation is ordered on the main stream: another stream using it waits for that point.
  cuda_join(s, s.main, cuda_stream(user));
  return {data, size};
}

void cuda_release(Device device, MemoryBlock block, const Stream& user) noexcept {
  if (block.data == nullptr) return;
  try {
    CudaDeviceState& s = cuda_device_state(device);
    // The free is ordered after the work queued on `user` so far, which may still read the block.
    cuda_join(s, cuda_stream(user), s.main);
    WF_CUDA_CHECK(cudaFreeAsync(block.data, s.main));
  } catch (...) {
    // Storages are freed from destructors, some at exit after the CUDA runtime has unloaded:
    // nothing can be freed then, and nothing needs to be. (A fault of a kernel is sticky: the
    // next synchronisation reports it.)
  }
}

DeviceBackend::CacheStats cuda_cache_stats() {
  DeviceBackend::CacheStats stats;
  for_each_started_cuda_device([&](CudaDeviceState& s) {
    const std::uint64_t reserved = pool_attribute(s.pool, cudaMemPoolAttrReservedMemCurrent);
    const std::uint64_t used = pool_attribute(s.pool, cudaMemPoolAttrUsedMemCurrent);
    stats.cached_bytes += static_cast<std::int64_t>(reserved - used);
  });
  stats.hits = g_cache_hits.load(std::memory_order_relaxed);
  return stats;
}

void cuda_empty_cache() {
  for_each_started_cuda_device([](CudaDeviceState& s) {
    // Every free is queued on the main stream (after the streams it waits for): once it has run
    // to here, the blocks are free to hand back.
    WF_CUDA_CHECK(cudaStreamSynchronize(s.main));
    WF_CUDA_CHECK(cudaMemPoolTrimTo(s.pool, 0));
  });
  pinned_cache().empty();
}

namespace {

// PinnedCache's device calls, through the CUDA runtime.
class CudaPinnedApi final : public PinnedHostApi {
 public:
  void* allocate(std::size_t nbytes) override {
    void* data = nullptr;
    // Portable: pinned for every device of the process, whichever is current now.
    const cudaError_t status = cudaHostAlloc(&data, nbytes, cudaHostAllocPortable);
    if (status == cudaSuccess) return data;
    cudaGetLastError();
    last_failure.store(status);
    return nullptr;
  }
  void free(void* data) override {
    if (cudaFreeHost(data) != cudaSuccess) cudaGetLastError();  // at exit: nothing to do
  }
  void* record_new_event(int device, std::uint64_t stream) override {
    cuda_set_device(Device::cuda(device));  // an event belongs to the device current at its creation
    cudaEvent_t event = nullptr;
    WF_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    record(event, device, stream);
    return event;
  }
  void record(void* event, int, std::uint64_t stream) override {
    WF_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), reinterpret_cast<cudaStream_t>(stream)));
  }
  bool completed(void* event) override {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // "not yet" is no error for the next check to find
      return false;
    }
    WF_CUDA_CHECK(status);
    return true;
  }
  void synchronize(void* event) override { WF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
  void destroy_event(void* event) override {
    if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) cudaGetLastError();
  }

  std::atomic<cudaError_t> last_failure{cudaSuccess};
};

// Released pinned blocks kept for reuse, at most this many bytes: enough for MPI's staging of a
// step's tensors (each send and receive asks for one) without holding the host's memory locked.
constexpr std::size_t kPinnedCacheLimit = std::size_t{1} << 30;

CudaPinnedApi& pinned_api() {
  static auto* api = new CudaPinnedApi();  // never destroyed, as the cache
  return *api;
}
PinnedCache& pinned_cache() {
  // Never destroyed: storages may release pinned blocks from static destructors. Making it calls
  // no CUDA function.
  static auto* cache = new PinnedCache(pinned_api(), kPinnedCacheLimit);
  return *cache;
}

}  // namespace

MemoryBlock cuda_allocate_pinned(std::size_t nbytes) {
  // Page-locking needs a driver and a GPU: the same error as a device allocation without one.
  check_cuda_device(Device::cuda(0));
  WF_CHECK(nbytes <= SIZE_MAX / 2, "cuda: cannot allocate {} bytes of pinned host memory", nbytes);
  const MemoryBlock block = pinned_cache().allocate(nbytes);
  if (block.data == nullptr) {
    WF_FAIL("cuda: cannot allocate {} bytes ({:.2f} GiB) of pinned host memory: {}; the host is short of "
            "page-lockable memory (ulimit -l, or other processes' pinned buffers)",
            nbytes, gib(nbytes), cudaGetErrorString(pinned_api().last_failure.load()));
  }
  return block;
}

void cuda_release_pinned(MemoryBlock block) noexcept { pinned_cache().release(block.data); }

void cuda_pinned_used_by(const void* host, std::size_t nbytes, const Stream& stream, cudaStream_t native) {
  pinned_cache().used_by(host, nbytes, stream.device().index, reinterpret_cast<std::uint64_t>(native));
}

}  // namespace wf::detail
