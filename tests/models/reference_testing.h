#pragma once
// What the comparisons with PyTorch share (test_decoder_reference.cpp, test_dit_reference.cpp):
// the interpreter that has Debian's torch, and the error measure max |ours − torch| relative to
// the reference tensor's scale.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "wallfacer/core/tensor.h"

namespace wf::models::testing {

// The references run in f64, so what is measured is our f32 error: max |ours − torch| ≤ 1e-5 ·
// max |torch| per tensor, plus 1e-9 absolute for all-zero gradients.
constexpr double kRelTolerance = 1e-5;
constexpr double kAbsFloor = 1e-9;
inline const char* const kPython = "/usr/bin/python3";

inline bool python_has_torch() {
  return std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

// max |a − b| / max |b|: the error relative to the reference tensor's scale.
struct ReferenceError {
  double max_abs = 0, scale = 0;
  bool ok() const { return max_abs <= kRelTolerance * scale + kAbsFloor; }
  double relative() const { return scale > 0 ? max_abs / scale : max_abs; }
};

inline ReferenceError compare_to_reference(const Tensor& ours, const Tensor& reference) {
  REQUIRE(ours.shape() == reference.shape());
  const auto x = ours.to_vector<double>(), y = reference.to_vector<double>();
  ReferenceError e;
  for (std::size_t i = 0; i < x.size(); ++i) {
    e.max_abs = std::max(e.max_abs, std::abs(x[i] - y[i]));
    e.scale = std::max(e.scale, std::abs(y[i]));
  }
  return e;
}

}  // namespace wf::models::testing
