#include "wallfacer/train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "wallfacer/core/error.h"

namespace wf::train {

double CosineSchedule::lr_at(std::int64_t step) const {
  WF_CHECK(base_lr >= 0.0 && min_lr >= 0.0 && min_lr <= base_lr,
           "CosineSchedule: need 0 <= min_lr <= base_lr, got min_lr={} base_lr={}", min_lr, base_lr);
  WF_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps,
           "CosineSchedule: need 0 <= warmup_steps <= total_steps, got warmup_steps={} total_steps={}", warmup_steps,
           total_steps);
  WF_CHECK(step >= 0, "CosineSchedule::lr_at: step must be >= 0, got {}", step);
  if (step < warmup_steps) return base_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace wf::train
