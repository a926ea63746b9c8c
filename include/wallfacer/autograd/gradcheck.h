#pragma once
// Numerical gradient check: compares the gradients backward() computes for fn with central
// differences, in f64. For every input that requires grad and every element x_j:
//   numeric_j = (L(x_j + eps) − L(x_j − eps)) / (2·eps),  L = Σ_i <fn(x)_i, g_i>
// with fixed random output weights g_i; analytic_j comes from backward(outputs, g).
// An element fails when |analytic − numeric| > atol + rtol·|numeric|.
#include <cstdint>
#include <functional>
#include <string>

#include "wallfacer/autograd/node.h"

namespace wf::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  std::uint64_t seed = 20240701;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::int64_t elements_checked = 0;
  std::string message;  // the first failure: input, element, analytic and numeric values
};

using GradcheckFn = std::function<TensorList(const TensorList&)>;
// Inputs must be f64; those with requires_grad() are checked, the others held constant.
GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options = {});

}  // namespace wf::autograd
