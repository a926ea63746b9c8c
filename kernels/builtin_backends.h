#pragma once
// The kernel backends built into every build (kernels/backend.cpp registers them).
#include "kernels/backend.h"

namespace wf::kernels {
// The CPU's kernels (kernels/cpu), run inline on the calling thread.
Backend& cpu_kernels();
// The test device's: the same CPU kernels, run on its streams inside its memory's access scope
// (kernels/testdev/test_device_kernels.cpp).
Backend& test_device_kernels();
// The CUDA kernels (kernels/cuda), in builds with the CUDA toolkit (WF_HAVE_CUDA): registered
// whether or not a GPU is visible; a kernel launched without one fails naming the device.
Backend& cuda_kernels();
}  // namespace wf::kernels
