#pragma once
// Learning-rate schedules.
#include <cstdint>

namespace wf::train {

// Linear warmup from 0 to base_lr over warmup_steps, cosine decay to min_lr at total_steps,
// min_lr after. `step` counts updates, 1-based (the first update uses lr_at(1) =
// base_lr / warmup_steps); lr_at(0) = 0 when there is a warmup.
struct CosineSchedule {
  double base_lr = 0.0;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;

  double lr_at(std::int64_t step) const;
};

}  // namespace wf::train
