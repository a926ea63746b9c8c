#pragma once
// What the CPU's and the test device's backends share: their memory is host memory and they run
// their work inline, as it is queued. So every stream is always idle and every event complete:
// synchronising waits for nothing (it still counts, see wallfacer/core/stream.h), and a new
// stream is only a new handle. Pinned buffers are plain aligned host memory.
#include "wallfacer/core/device_backend.h"

namespace wf::detail {

class HostBackend : public DeviceBackend {
 public:
  MemoryBlock allocate_pinned(std::size_t nbytes) override;
  void release_pinned(MemoryBlock block) override;

  Stream create_stream(Device device) override;
  void synchronize(const Stream&) override {}
  bool query(const Stream&) override { return true; }
  void synchronize_device(Device) override {}
  std::shared_ptr<void> create_event(Device) override { return nullptr; }
  void record(const std::shared_ptr<void>&, const Stream&) override {}
  void wait(const Stream&, const std::shared_ptr<void>&) override {}
  void synchronize_event(void*) override {}
  bool query_event(void*) override { return true; }
};

DeviceBackend& cpu_backend();
DeviceBackend& test_device_backend();

}  // namespace wf::detail
