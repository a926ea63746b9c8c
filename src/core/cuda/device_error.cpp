#include "src/core/cuda/device_error.h"

#include <fmt/args.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

constexpr int kMaxDevices = 64;

struct Records {
  std::mutex mutex;
  std::array<DeviceErrorRecord*, kMaxDevices> host{};    // the host's view of each device's record
  std::array<DeviceErrorRecord*, kMaxDevices> device{};  // the same memory as the kernels see it
  std::vector<std::string> messages;  // by id
  std::map<std::string, int> ids;     // by text: one id per distinct message
};
Records& records() {
  static auto* instance = new Records();  // never destroyed: kernels may still be queued at exit
  return *instance;
}

}  // namespace

DeviceErrorRecord* device_error_record(int device_index) {
  WF_CHECK(device_index >= 0 && device_index < kMaxDevices, "cuda:{}: device index out of range", device_index);
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.device[device_index] == nullptr) {
    cuda_set_device(Device::cuda(device_index));
    void* host = nullptr;
    WF_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<DeviceErrorRecord*>(host) = DeviceErrorRecord{0, 0, 0, 0, 0};
    void* device = nullptr;
    WF_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    r.host[device_index] = static_cast<DeviceErrorRecord*>(host);
    r.device[device_index] = static_cast<DeviceErrorRecord*>(device);
  }
  return r.device[device_index];
}

int register_device_error_message(const char* format) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto [it, fresh] = r.ids.try_emplace(format, static_cast<int>(r.messages.size()));
  if (fresh) r.messages.push_back(it->first);
  return it->second;
}

void raise_device_error(int device_index) {
  if (device_index < 0 || device_index >= kMaxDevices) return;
  Records& r = records();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    volatile DeviceErrorRecord* record = r.host[device_index];
    // `ready`, not `raised`: a kernel still running on another stream may have claimed the record
    // without having written its fields yet; it is raised at a later synchronisation.
    if (record == nullptr || record->ready == 0) return;
    std::atomic_thread_fence(std::memory_order_acquire);
    const int id = record->message;
    const long long row = record->row, value = record->value;
    record->message = 0;
    record->row = 0;
    record->value = 0;
    record->ready = 0;
    std::atomic_thread_fence(std::memory_order_release);
    record->raised = 0;  // last: the next kernel to claim it finds it clear
    const std::string format = id >= 0 && id < static_cast<int>(r.messages.size())
                                   ? r.messages[static_cast<std::size_t>(id)]
                                   : std::string("a CUDA kernel reported error {} {} with an unknown message id");
    try {
      message = fmt::vformat(format, fmt::make_format_args(row, value));
    } catch (const fmt::format_error&) {
      message = format + fmt::format(" (row {}, value {})", row, value);
    }
  }
  WF_FAIL("cuda:{}: {}", device_index, message);
}

}  // namespace wf::detail
