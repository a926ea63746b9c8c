// STUB: replaced by the CUDA device backend (memory, streams, events, copies).
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {
class Stub final : public DeviceBackend {
 public:
  MemoryBlock allocate(Device, std::size_t) override { WF_FAIL("cuda: not implemented yet"); }
  void release(Device, MemoryBlock) override {}
  MemoryBlock allocate_pinned(std::size_t) override { WF_FAIL("cuda: not implemented yet"); }
  void release_pinned(MemoryBlock) override {}
  void copy_from_host(void*, const void*, std::size_t, const Stream&) override { WF_FAIL("cuda: not implemented yet"); }
  void copy_to_host(void*, const void*, std::size_t, const Stream&) override { WF_FAIL("cuda: not implemented yet"); }
  void convert(const void*, DType, void*, DType, std::int64_t, const Stream&) override { WF_FAIL("cuda: not implemented yet"); }
  void fill(void*, DType, std::int64_t, double, const Stream&) override { WF_FAIL("cuda: not implemented yet"); }
  Stream create_stream(Device) override { WF_FAIL("cuda: not implemented yet"); }
  void synchronize(const Stream&) override {}
  bool query(const Stream&) override { return true; }
  void synchronize_device(Device) override {}
  std::shared_ptr<void> create_event(Device) override { return nullptr; }
  void record(const std::shared_ptr<void>&, const Stream&) override {}
  void wait(const Stream&, const std::shared_ptr<void>&) override {}
  void synchronize_event(void*) override {}
  bool query_event(void*) override { return true; }
};
}  // namespace

DeviceBackend& cuda_device_backend() {
  static auto* backend = new Stub();
  return *backend;
}
void cuda_set_device(Device) {}
cudaStream_t cuda_stream(const Stream&) { WF_FAIL("cuda: not implemented yet"); }
int cuda_device_count() { return 0; }
int cuda_multiprocessors(Device) { return 0; }
int cuda_compute_capability(Device) { return 0; }
CudaScratch::CudaScratch(const Stream& stream, std::size_t nbytes) : stream_(stream), nbytes_(nbytes) {
  WF_FAIL("cuda: not implemented yet");
}
CudaScratch::CudaScratch(const Stream& stream, const void*, std::size_t nbytes) : stream_(stream), nbytes_(nbytes) {
  WF_FAIL("cuda: not implemented yet");
}
CudaScratch::~CudaScratch() {}
}  // namespace wf::detail
