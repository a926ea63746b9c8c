#pragma once
// What the comparisons with PyTorch share (test_decoder_reference.cpp, test_dit_reference.cpp):
// the interpreter that has Debian's torch, and the error measure max |ours − torch| relative to
// the reference tensor's scale.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/train/safetensors.h"

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

// Runs tests/reference/<script> once over every (in, out) file pair: importing torch takes seconds.
inline void run_reference_script(const std::string& script, const std::vector<std::pair<std::string, std::string>>& files) {
  INFO(kPython << " cannot import torch (Debian: apt-get install python3-torch)");
  REQUIRE(python_has_torch());
  std::string command = fmt::format("{} {}/tests/reference/{}", kPython, WF_SOURCE_DIR, script);
  for (const auto& [in, out] : files) command += " " + in + " " + out;
  REQUIRE(std::system(command.c_str()) == 0);
}

// Compares our `outputs` (by the reference file's names) and the gradient of every parameter of
// `model` ("grad.<name>") with the reference's OUT file, which must hold nothing else; prints the
// worst relative error. `loss` is the scalar the summary line names.
inline void check_against_reference(const std::string& label, const std::string& out_file,
                                    const std::vector<std::pair<std::string, Tensor>>& outputs,
                                    const nn::Module& model, double loss) {
  INFO(label);
  const auto ref = train::load_safetensors(out_file).tensors;
  double worst = 0;
  std::string worst_name;
  const auto check = [&](const std::string& name, const Tensor& ours, const Tensor& reference) {
    const ReferenceError e = compare_to_reference(ours, reference);
    INFO(name << ": max |ours - torch| = " << e.max_abs << ", max |torch| = " << e.scale);
    CHECK(e.ok());
    if (e.relative() > worst) worst = e.relative(), worst_name = name;
  };
  for (const auto& [name, tensor] : outputs) check(name, tensor, ref.at(name));
  std::size_t grads = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    REQUIRE(p.grad().defined());
    check("grad " + name, p.grad(), ref.at("grad." + name));
    ++grads;
  }
  CHECK(ref.size() == grads + outputs.size());  // nothing in the reference that we lack
  std::printf("vs PyTorch, %s: loss %.7f, worst relative error %.2e (%s) over %zu outputs and %zu gradients "
              "(limit %.0e)\n",
              label.c_str(), loss, worst, worst_name.c_str(), outputs.size(), grads, kRelTolerance);
}

}  // namespace wf::models::testing
