#pragma once
// The kernel backends built into every build (kernels/backend.cpp registers them).
#include "kernels/backend.h"

namespace wf::kernels {
// The CPU's kernels (kernels/cpu), run inline on the calling thread.
Backend& cpu_kernels();
// The test device's: the same CPU kernels, run on its streams inside its memory's access scope
// (kernels/testdev/test_device_kernels.cpp).
Backend& test_device_kernels();
}  // namespace wf::kernels
