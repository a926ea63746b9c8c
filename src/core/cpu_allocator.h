#pragma once
// Host memory for tensor storages, with a cache of freed blocks.
//
// A training step allocates the same tensors every step (activations, logits, gradients). With
// plain malloc every large block is an mmap that the kernel zero-fills page by page on first
// touch and unmaps on free, so each step pays one page fault per 4 KiB of every large tensor:
// about half of a GPT-2 124M step on the 2-core CI machine (docs/kernels-cpu.md). Caching the
// freed blocks and handing them back for requests of (nearly) the same size makes every step
// after the first reuse warm memory.
//
// Blocks of at least kMinCachedBytes are cached; smaller ones go straight to malloc, whose
// arenas already reuse them. A freed block serves a later request of its size down to 7/8 of
// it (bounded waste, never a split). The cache holds at most min(limit(), 2 × the most bytes
// ever handed out at once); when a freed block would push it over, the largest cached blocks
// are released first. An allocation that fails releases the whole cache and retries before
// reporting out-of-memory.
//
// limit() defaults to half of this process's share of memory: the machine's, or its cgroup's
// limit when lower, divided by the ranks on the node when the MPI launcher says how many
// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS). WF_CPU_CACHE_MB=<n> sets it instead (0 turns
// the cache off). Address-sanitizer builds start with the cache off, so that a use after free
// still touches freed memory and is reported. WF_CPU_ALLOC_POISON=1 fills every new block with
// 0xFF bytes (NaN floats): with it, code that reads tensor memory it never wrote fails its tests
// (tests/CMakeLists.txt runs a pass).
#include <cstddef>
#include <cstdint>

namespace wf::detail {

inline constexpr std::size_t kTensorAlignment = 64;  // a cache line; enough for any SIMD load
inline constexpr std::size_t kMinCachedBytes = std::size_t{64} << 10;

// A block of at least the requested bytes, kTensorAlignment-aligned; size is what it really
// holds (a cached block may be up to 1/7 larger than asked for) and is passed back on release.
struct HostBlock {
  void* data = nullptr;
  std::size_t size = 0;
};
HostBlock cpu_allocate(std::size_t nbytes);  // nbytes > 0
void cpu_release(HostBlock block);

struct CpuCacheStats {
  std::int64_t cached_bytes = 0;  // freed blocks held for reuse
  std::int64_t hits = 0;          // requests served from the cache since the start
};
CpuCacheStats cpu_cache_stats();
void cpu_empty_cache();
std::size_t cpu_cache_limit();
void set_cpu_cache_limit(std::size_t bytes);  // 0 turns caching off and empties the cache

}  // namespace wf::detail
