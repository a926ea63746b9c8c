// The test device's kernel backend (docs/devices.md): the CPU kernels, each run on the test
// device's stream (at once, or queued on the stream's worker in asynchronous mode) and inside an
// access scope, the only time its memory is readable. A computation on its tensors that does not
// come through here touches protected memory and faults.
#include "kernels/builtin_backends.h"
#include "kernels/cpu/host_kernels.h"
#include "src/core/test_device.h"
#include "src/core/test_device_streams.h"

namespace wf::kernels {
namespace {

struct OnTestStream {
  template <class F>
  static void run(const Stream& stream, F&& kernel) {
    detail::test_stream_run(stream, [kernel = std::forward<F>(kernel)] {
      detail::TestDeviceAccess access;
      kernel();
    });
  }
};

}  // namespace

Backend& test_device_kernels() {
  static auto* backend = new cpu::HostKernels<OnTestStream>("testdev");
  return *backend;
}

}  // namespace wf::kernels
