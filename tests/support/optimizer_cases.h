#pragma once
// The parameters and gradients of the optimizer's device cases: tests/train/test_optimizer_on_device.cpp
// (the test device, bit for bit) and tests/cuda/test_optimizer_on_cuda.cpp (a GPU, within
// tolerances) share them.
#include <vector>

#include "wallfacer/core/tensor.h"

namespace wf::parity {

// Parameters of both dtypes, with and without weight decay (2-D and 1-D), and one without a grad,
// on `device`, requiring gradients.
std::vector<Tensor> make_params(Device device);

// The gradients of step `step` on `device`, times `scale` (3 by default: large enough that
// clipping to 1 scales them; an infinity or NaN poisons them). The last parameter gets none.
void set_grads(std::vector<Tensor>& params, int step, Device device, double scale = 3.0);

}  // namespace wf::parity
