#pragma once
// The optimizer's device cases: tests/train/test_optimizer_on_device.cpp (the test device, bit for
// bit) and tests/cuda/test_optimizer_on_cuda.cpp (a GPU, within tolerances) share them.
#include <cstdint>
#include <vector>

#include "wallfacer/core/tensor.h"
#include "wallfacer/train/optimizer.h"

namespace wf::parity {

// AdamW with weight decay and an EMA.
train::AdamWOptions adamw_options();

// Parameters of both dtypes, with and without weight decay (2-D and 1-D), and one without a grad,
// on `device`, requiring gradients.
std::vector<Tensor> make_params(Device device);

// The gradients of step `step` on `device`, times `scale` (3 by default: large enough that
// clipping to 1 scales them; an infinity or NaN poisons them). The last parameter gets none.
void set_grads(std::vector<Tensor>& params, int step, Device device, double scale = 3.0);

// One step of step `step`'s gradients clipped to 1, on the CPU with the norm read on the host
// (clip_grad_norm) and on `device` with it left there (clip_grad_norm_on_device, then step()).
struct ClippedStep {
  double cpu_norm = 0;
  Tensor device_norm;
  std::int64_t device_host_syncs = 0;  // while the device clipped and updated
};
ClippedStep clipped_step(std::vector<Tensor>& cpu, train::AdamW& cpu_opt, std::vector<Tensor>& dev,
                         train::AdamW& dev_opt, Device device, int step);

// Step 0's gradients times infinity on the CPU and on `device`, each clipped with its norm read on
// the host (clip_grad_norm, the one read of the skip decision).
struct PoisonedClip {
  double cpu_norm = 0, device_norm = 0;
  std::int64_t device_host_syncs = 0;  // while the device's norm was found and read
  std::vector<Tensor> cpu, dev;        // the parameters, their gradients poisoned
};
PoisonedClip poisoned_clip(Device device);

// The gradient scales of the skipped-step cases: steps 0 and 2 are not finite, so the first
// skipped step comes before any update (no state yet).
std::vector<double> skip_scales();

// Step `step` with its gradients times `scale`, the skip decided on `device`: AdamW's step(norm)
// with the norm clip_grad_norm_on_device leaves there. Returns the host synchronisations it made.
std::int64_t device_decided_step(std::vector<Tensor>& params, train::AdamW& opt, Device device, int step,
                                 double scale);
// The same decided on the host (CPU parameters): the norm read, step() only when it is finite.
void host_decided_step(std::vector<Tensor>& params, train::AdamW& opt, int step, double scale);

}  // namespace wf::parity
