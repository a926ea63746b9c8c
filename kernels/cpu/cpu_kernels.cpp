// The CPU's kernel backend: the kernels of this folder, run inline on the calling thread (the
// CPU's streams are always idle, so running at once is running in stream order).
#include "kernels/builtin_backends.h"
#include "kernels/cpu/host_kernels.h"

namespace wf::kernels {
namespace {

struct Inline {
  template <class F>
  static void run(const Stream&, F&& kernel) {
    kernel();
  }
};

}  // namespace

Backend& cpu_kernels() {
  static auto* backend = new cpu::HostKernels<Inline>("cpu");
  return *backend;
}

}  // namespace wf::kernels
