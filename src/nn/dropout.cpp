#include "wallfacer/nn/dropout.h"

#include "wallfacer/ops/activation.h"

namespace wf::nn {

Dropout::Dropout(double p) : p_(p) {
  WF_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (is_identity()) return x;
  return drop(x);
}

Tensor Dropout::drop(const Tensor& x) const { return dropout(x, p_, true); }

}  // namespace wf::nn
