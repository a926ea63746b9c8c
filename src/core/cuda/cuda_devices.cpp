// Which CUDA devices exist, the current device of each thread, and each device's state (main
// stream, memory pool) made on its first use.
#include "src/core/cuda/cuda_devices.h"

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

constexpr int kMaxDevices = 64;  // as device_error.cpp's records

struct VisibleDevices {
  int count = 0;
  std::string why_none;  // the runtime's reason when count is 0
};

// Asked once, on the first use of a CUDA device (cudaGetDeviceCount loads the driver).
const VisibleDevices& visible_devices() {
  static const VisibleDevices devices = [] {
    VisibleDevices d;
    const cudaError_t status = cudaGetDeviceCount(&d.count);
    if (status != cudaSuccess) {
      d.count = 0;
      d.why_none = cudaGetErrorString(status);
      cudaGetLastError();  // reported here; not left for the next call to find
    } else if (d.count == 0) {
      d.why_none = "the CUDA runtime reports 0 devices";
    }
    return d;
  }();
  return devices;
}

struct States {
  std::array<std::once_flag, kMaxDevices> once;
  std::array<std::atomic<CudaDeviceState*>, kMaxDevices> state{};
};
States& states() {
  static auto* instance = new States();  // never destroyed: streams and pools live as long as the process
  return *instance;
}

std::atomic<std::uint64_t> g_release_threshold{UINT64_MAX};

// The device this thread last made current through cuda_set_device (-1: none yet), checked
// before: another library may have switched the device since (NCCL's guard restores it, but a
// call made inside such a guard moved this mark), so a match is confirmed with cudaGetDevice,
// which asks the runtime's per-thread state, not the driver.
thread_local int t_current_device = -1;

void start_device(CudaDeviceState& s) {
  WF_CUDA_CHECK(cudaStreamCreateWithFlags(&s.main, cudaStreamNonBlocking));
  // A pool of our own rather than the device's default one: its used and reserved bytes are
  // this process's tensors alone, whatever else (a library) allocates on the device.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = s.index;
  WF_CUDA_CHECK(cudaMemPoolCreate(&s.pool, &props));
  std::uint64_t threshold = g_release_threshold.load();
  WF_CUDA_CHECK(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  WF_CUDA_CHECK(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming));
  int major = 0, minor = 0;
  WF_CUDA_CHECK(cudaDeviceGetAttribute(&s.multiprocessors, cudaDevAttrMultiProcessorCount, s.index));
  WF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s.index));
  WF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, s.index));
  s.compute_capability = major * 10 + minor;
  std::size_t free = 0;
  WF_CUDA_CHECK(cudaMemGetInfo(&free, &s.total_memory));
}

}  // namespace

int cuda_device_count() { return visible_devices().count; }

void check_cuda_device(Device device) {
  WF_CHECK(device.is_cuda(), "{} is not a CUDA device", device.str());
  const VisibleDevices& visible = visible_devices();
  WF_CHECK(visible.count > 0, "{}: no CUDA GPU is visible to this process ({}): set train.device: cpu", device.str(),
           visible.why_none);
  WF_CHECK(device.index >= 0 && device.index < visible.count && device.index < kMaxDevices,
           "{}: this machine has {} visible GPU(s), cuda:0 to cuda:{} (CUDA_VISIBLE_DEVICES chooses which)",
           device.str(), visible.count, visible.count - 1);
}

void cuda_set_device(Device device) {
  if (device.index == t_current_device && device.index >= 0 && device.is_cuda()) {
    int current = -1;
    const cudaError_t status = cudaGetDevice(&current);
    if (status == cudaSuccess && current == device.index) return;
    if (status != cudaSuccess) cudaGetLastError();  // cudaSetDevice below reports what is wrong
  }
  check_cuda_device(device);
  WF_CUDA_CHECK(cudaSetDevice(device.index));
  t_current_device = device.index;
}

CudaDeviceState& cuda_device_state(Device device) {
  if (device.is_cuda() && device.index >= 0 && device.index < kMaxDevices) {
    if (CudaDeviceState* s = states().state[device.index].load(std::memory_order_acquire)) {
      cuda_set_device(device);
      return *s;
    }
  }
  cuda_set_device(device);  // checks the device
  States& all = states();
  // A failed start throws out of call_once, which then lets the next use try again.
  std::call_once(all.once[device.index], [&] {
    auto s = std::make_unique<CudaDeviceState>();
    s->index = device.index;
    start_device(*s);
    all.state[device.index].store(s.release(), std::memory_order_release);
  });
  return *all.state[device.index].load(std::memory_order_acquire);
}

void for_each_started_cuda_device(const std::function<void(CudaDeviceState&)>& f) {
  for (auto& slot : states().state)
    if (CudaDeviceState* s = slot.load(std::memory_order_acquire)) f(*s);
}

void cuda_join(CudaDeviceState& state, cudaStream_t producer, cudaStream_t waiter) {
  if (producer == waiter) return;
  // A wait uses the event's latest record, so no other thread may record it in between.
  std::lock_guard<std::mutex> lock(state.join_mutex);
  WF_CUDA_CHECK(cudaEventRecord(state.join, producer));
  WF_CUDA_CHECK(cudaStreamWaitEvent(waiter, state.join, 0));
}

cudaStream_t cuda_stream(const Stream& stream) {
  WF_CHECK(stream.device().is_cuda(), "cuda_stream: the stream is {}'s, not a CUDA device's", stream.device().str());
  CudaDeviceState& state = cuda_device_state(stream.device());
  return stream.handle() == 0 ? state.main : reinterpret_cast<cudaStream_t>(stream.handle());
}

int cuda_multiprocessors(Device device) { return cuda_device_state(device).multiprocessors; }
int cuda_compute_capability(Device device) { return cuda_device_state(device).compute_capability; }

std::uint64_t cuda_pool_release_threshold() { return g_release_threshold.load(); }

void set_cuda_pool_release_threshold(std::uint64_t bytes) {
  g_release_threshold.store(bytes);
  for_each_started_cuda_device([&](CudaDeviceState& s) {
    std::uint64_t threshold = bytes;
    WF_CUDA_CHECK(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    // What is cached beyond the new limit goes back now (memory still in use stays).
    WF_CUDA_CHECK(cudaMemPoolTrimTo(s.pool, static_cast<std::size_t>(bytes)));
  });
}

}  // namespace wf::detail
