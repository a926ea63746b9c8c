#pragma once
// The tolerances of the CUDA suite's parity cases above the kernels (whole ops, models, sp
// strategies, the optimizer on a GPU against the same computation on the CPU), and the
// comparison they use. A GPU sums in another order than the CPU (tree reductions, cuBLASLt's
// split-K, warp shuffles) and may fuse multiply-adds, so its results differ from the CPU's by a
// few roundings of the largest partial sum: a relative bound alone fails wherever an element is
// the small difference of large terms (a gradient that nearly cancels, a centred activation),
// and a bound relative to the tensor's own magnitude is what a difference of summation order
// respects. Every bound here is therefore
//
//     |got − want| ≤ rtol·|want| + floor·max|want|        (elementwise, max over the tensor)
//
// with integer tensors (indices, counts, argmax) equal and every non-finite value where the CPU
// has it (NaN where NaN, the same infinity), and only there.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "wallfacer/core/tensor.h"

namespace wf::cuda_test {

struct Tolerance {
  double rtol = 0;
  double floor = 0;  // × the largest finite |want| of the tensor
};

// One op's output or gradient, by the dtype the case runs in:
// - f32 1e-5 + 1e-5·max: the op cases reduce over at most 120 elements (a GEMM's K ≤ 8, a
//   softmax or norm row of 8, a sum over 3·5·8): a different order changes a result by at most
//   a few f32 roundings (6e-8) of a partial sum no larger than a few times the output's largest
//   element, ~1e-6 of it; 1e-5 leaves a margin of ten and still catches every indexing or
//   masking mistake, which is off by O(1).
// - f64 1e-10 + 1e-10·max: the same argument at f64's 1.1e-16, with the margin for the CPU's
//   f64 transcendentals (exp, log, tanh) against CUDA's, which differ by a few ulp.
// - bf16 2e-2 + 2e-2·max: both devices widen to f32 inside an op and round its result to bf16
//   (8 significant bits, one rounding 3.9e-3); an f32 difference that straddles a rounding
//   boundary moves an element by one bf16 step, and a chain of ops (attention, norms) by a few:
//   2e-2 is five steps.
inline Tolerance op_tolerance(DType dtype) {
  if (dtype == DType::f64) return {1e-10, 1e-10};
  if (dtype == DType::bf16 || dtype == DType::f16) return {2e-2, 2e-2};
  return {1e-5, 1e-5};
}

// The largest finite |x| of a CPU f64 tensor (0 when there is none).
inline double largest_magnitude(const Tensor& x) {
  double largest = 0;
  const double* p = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (std::isfinite(p[i])) largest = std::max(largest, std::abs(p[i]));
  }
  return largest;
}

// "" when `got` (any device) matches `want` within `tol`, else what differs: definedness, dtype,
// shape, a non-finite value where the CPU's is finite (or the other way), or the element furthest
// outside the bound with both values. `allowance`, when given (a CPU f64 tensor of want's shape),
// adds its element to that element's bound. Use as CHECK(mismatch(...) == "").
inline std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol, const Tensor& allowance = Tensor()) {
  std::ostringstream out;
  if (got.defined() != want.defined()) {
    out << (want.defined() ? "undefined on the GPU, defined on the CPU" : "defined on the GPU, undefined on the CPU");
    return out.str();
  }
  if (!want.defined()) return "";
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    out << "GPU " << dtype_name(got.dtype()) << " " << shape_str(got.shape()) << ", CPU "
        << dtype_name(want.dtype()) << " " << shape_str(want.shape());
    return out.str();
  }
  if (!is_floating(want.dtype())) tol = {0, 0};
  const Tensor g = got.to(Device::cpu()).to(DType::f64), w = want.to(Device::cpu()).to(DType::f64);
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  const double* ap = allowance.defined() ? allowance.data<double>() : nullptr;
  const double floor = tol.floor * largest_magnitude(w);
  std::int64_t worst = -1;
  double worst_excess = 0;
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    if (!std::isfinite(wp[i]) || !std::isfinite(gp[i])) {
      const bool same = std::isnan(wp[i]) ? std::isnan(gp[i]) : gp[i] == wp[i];
      if (!same) {
        out << "element " << i << " of " << w.numel() << ": GPU " << gp[i] << ", CPU " << wp[i] << " (not finite)";
        return out.str();
      }
      continue;
    }
    const double excess = std::abs(gp[i] - wp[i]) - (tol.rtol * std::abs(wp[i]) + floor + (ap ? ap[i] : 0.0));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst < 0) return "";
  out << "element " << worst << " of " << w.numel() << ": GPU " << gp[worst] << ", CPU " << wp[worst] << " (rtol "
      << tol.rtol << ", floor " << floor << " = " << tol.floor << " x max |CPU|"
      << (ap ? ", allowance " + std::to_string(ap[worst]) : std::string()) << ")";
  return out.str();
}

}  // namespace wf::cuda_test
