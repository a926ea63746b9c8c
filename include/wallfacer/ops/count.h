#pragma once
// Counts the step keeps on the device (no host read): the count that goes with a loss sum.
#include <cstdint>

#include "wallfacer/core/tensor.h"

namespace wf {

// How many targets are not ignore_index, as a 0-dim i64 tensor on the targets' device: the
// device-side count_targets (ops/loss.h), which the trainer adds into its loss totals without
// reading the host.
Tensor count_targets_device(const Tensor& targets, std::int64_t ignore_index = -100);

}  // namespace wf
