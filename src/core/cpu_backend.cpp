// The CPU's backend: the caching host allocator (src/core/cpu_allocator.h) and the host copies.
#include <cstring>

#include "src/core/cpu_allocator.h"
#include "src/core/host_backend.h"
#include "src/core/host_copy.h"

namespace wf::detail {
namespace {

class CpuBackend final : public HostBackend {
 public:
  MemoryBlock allocate(Device, std::size_t nbytes) override {
    const HostBlock block = cpu_allocate(nbytes);
    return {block.data, block.size};
  }
  void release(Device, MemoryBlock block) override { cpu_release({block.data, block.size}); }
  CacheStats cache_stats() override {
    const CpuCacheStats stats = cpu_cache_stats();
    return {stats.cached_bytes, stats.hits};
  }
  void empty_cache() override { cpu_empty_cache(); }
  std::size_t cache_limit() override { return cpu_cache_limit(); }
  void set_cache_limit(std::size_t bytes) override { set_cpu_cache_limit(bytes); }

  // The CPU is the host: its "device" memory is host memory.
  void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, const Stream&) override {
    std::memcpy(dst, host_src, nbytes);
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, const Stream&) override {
    std::memcpy(host_dst, src, nbytes);
  }
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n, const Stream&) override {
    host_convert(src, src_dtype, dst, dst_dtype, n);
  }
  void fill(void* dst, DType dtype, std::int64_t n, double value, const Stream&) override {
    host_fill(dst, dtype, n, value);
  }
};

}  // namespace

DeviceBackend& cpu_backend() {
  static auto* instance = new CpuBackend();  // never destroyed: static tensors outlive statics
  return *instance;
}

}  // namespace wf::detail
