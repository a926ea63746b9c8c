#include "wallfacer/core/device_backend.h"

#include <array>
#include <atomic>
#include <cstdlib>

#include "src/core/cpu_allocator.h"
#include "src/core/host_backend.h"
#include "wallfacer/build_info.h"
#if WF_HAVE_CUDA
#include "src/core/cuda/cuda_device.h"
#endif
#include "wallfacer/core/error.h"
#include "wallfacer/core/graph.h"

namespace wf {
namespace {

// One slot per device type; the built-in backends are there from the first look-up, so no
// static initialisation order matters. Never destroyed: storages of static tensors release
// their memory during static destruction.
struct Registry {
  std::array<std::atomic<DeviceBackend*>, kDeviceTypeCount> slots{};
  Registry() {
    slots[static_cast<int>(DeviceType::cpu)].store(&detail::cpu_backend());
    slots[static_cast<int>(DeviceType::test)].store(&detail::test_device_backend());
#if WF_HAVE_CUDA
    slots[static_cast<int>(DeviceType::cuda)].store(&detail::cuda_device_backend());
#endif
  }
};
Registry& registry() {
  static auto* instance = new Registry();
  return *instance;
}

}  // namespace

void DeviceBackend::set_cache_limit(std::size_t bytes) {
  WF_CHECK(bytes == 0, "this device's allocator keeps no cache of freed blocks: its cache limit can only be 0, not {}",
           bytes);
}

namespace {
[[noreturn]] void refuse_graphs(const Stream& stream) {
  throw GraphCaptureError(fmt::format("{} records no graphs (graphs need a cuda or testdev device)",
                                      stream.device().str()));
}
}  // namespace

void DeviceBackend::begin_capture(const Stream& stream) { refuse_graphs(stream); }
std::shared_ptr<void> DeviceBackend::end_capture(const Stream& stream) { refuse_graphs(stream); }
void DeviceBackend::replay(const std::shared_ptr<void>&, const Stream& stream) { refuse_graphs(stream); }

DeviceBackend* find_device_backend(DeviceType type) {
  return registry().slots[static_cast<int>(type)].load(std::memory_order_acquire);
}

DeviceBackend& device_backend(Device device) {
  DeviceBackend* backend = find_device_backend(device.type);
  WF_CHECK(backend != nullptr, "{}: this build has no backend for {} devices (built in: cpu, testdev); keep tensors on "
           "the cpu", device.str(), device_type_name(device.type));
  return *backend;
}

void register_device_backend(DeviceType type, DeviceBackend* backend) {
  WF_CHECK(backend != nullptr, "register_device_backend: null backend for {}", device_type_name(type));
  DeviceBackend* none = nullptr;
  WF_CHECK(registry().slots[static_cast<int>(type)].compare_exchange_strong(none, backend),
           "register_device_backend: {} devices already have a backend", device_type_name(type));
}

PinnedHostBuffer::PinnedHostBuffer(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes > 0) block_ = device_backend(device).allocate_pinned(nbytes);
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (block_.data != nullptr) device_backend(device_).release_pinned(block_);
}

namespace detail {

MemoryBlock HostBackend::allocate_pinned(std::size_t nbytes) {
  const std::size_t size = (nbytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* data = std::aligned_alloc(kTensorAlignment, size);
  WF_CHECK(data != nullptr, "out of memory allocating a {}-byte host buffer", nbytes);
  return {data, size};
}

void HostBackend::release_pinned(MemoryBlock block) { std::free(block.data); }

Stream HostBackend::create_stream(Device device) {
  // Work runs inline, so a stream is only a name: distinct handles keep distinct streams apart.
  static std::atomic<std::uint64_t> next{1};
  return Stream(device, next.fetch_add(1));
}

}  // namespace detail
}  // namespace wf
