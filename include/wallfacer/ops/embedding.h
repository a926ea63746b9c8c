#pragma once
#include "wallfacer/core/tensor.h"

namespace wf {

// ids [...] i64 (or i32) into weight [V, D] → [..., D]; backward scatter-adds into weight.
Tensor embedding(const Tensor& ids, const Tensor& weight);

}  // namespace wf
