#pragma once
// A block of device memory shared by a tensor and its views. Allocations are counted so that
// benchmarks and the trainer can report live and peak memory per rank.
#include <cstddef>
#include <cstdint>

#include "wallfacer/core/device.h"

namespace wf {

class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
};

struct MemoryStats {
  std::int64_t live_bytes = 0;  // bytes held by storages now
  std::int64_t peak_bytes = 0;  // the most held at once since the last reset
  std::int64_t allocations = 0;
};
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory(Device device = Device::cpu());

}  // namespace wf
