#pragma once
// The step's loss totals kept on its device: the loss sums and element counts of its
// microbatches, summed over the ranks, and the normalisation of the gradients by the global
// count, all without reading the host. The trainer reads them once per logged step.
//
// The arithmetic is the host's, element for element (LossTotals in grad_sync.h): each loss sum is
// widened to f64 and added in microbatch order, the count likewise, the ranks' totals are summed
// by one all-reduce of the pair, and the gradients are scaled by 1 / count (0 when every target
// was ignored) and the loss is sum · (1 / count). So a run on any device matches the CPU's bit
// for bit.
#include <cstdint>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/train/grad_sync.h"

namespace wf::train {

class DeviceLossTotals {
 public:
  // Zeros on `device`.
  explicit DeviceLossTotals(Device device = Device::cpu());

  // Adds one microbatch's loss sum (a 0-dim floating tensor on the device; its graph is not
  // followed) and the number of elements counted into it: a device tensor (count_targets_device)
  // or a count the host already knows (from the batch it built: no host read).
  void add(const Tensor& loss_sum, const Tensor& count);
  void add(const Tensor& loss_sum, std::int64_t count);

  // [sum, count]: two f64 on the device.
  const Tensor& totals() const { return totals_; }
  Device device() const { return totals_.device(); }
  // The totals summed over `group` (one all-reduce of both; none on a group of one).
  DeviceLossTotals sum_over(comm::Group& group) const;
  // Reads the totals to the host: one host synchronisation (outside the step: validation, tests).
  LossTotals read() const;

 private:
  Tensor totals_;
};

// After the gradients of loss SUMS were summed over `group`: sums the loss totals over `group`,
// divides every gradient by the global count on the device and returns the global mean loss as a
// [1] f64 tensor on the device (no host read). With a global count of 0 the loss and the
// gradients are 0. The same numbers as normalise_gradients (grad_sync.h) bit for bit.
Tensor normalise_gradients_on_device(comm::Group& group, const std::vector<Tensor>& params,
                                     const DeviceLossTotals& local);

}  // namespace wf::train
