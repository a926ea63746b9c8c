#include "wallfacer/autograd/gradcheck.h"

#include <cmath>

#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"

namespace wf::autograd {
namespace {

// L = Σ_i <outputs_i, weights_i> over the floating outputs that have a weight.
double weighted_sum(const TensorList& outputs, const TensorList& weights) {
  double total = 0;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!weights[i].defined()) continue;
    const Tensor out = outputs[i].to(DType::f64);
    const double* o = out.data<double>();
    const double* w = weights[i].data<double>();
    for (std::int64_t j = 0; j < out.numel(); ++j) total += o[j] * w[j];
  }
  return total;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options) {
  TensorList leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) {
      leaves.emplace_back();
      continue;
    }
    WF_CHECK(!in.requires_grad() || in.dtype() == DType::f64,
             "gradcheck: input {} is {}; central differences need f64 inputs (use .to(DType::f64))", i,
             dtype_name(in.dtype()));
    Tensor leaf = in.detach().clone();
    if (in.requires_grad()) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }

  TensorList outputs = fn(leaves);
  TensorList weights(outputs.size());
  TensorList roots, root_grads;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !is_floating(outputs[i].dtype())) continue;
    weights[i] = Tensor::randn_at(outputs[i].shape(), options.seed, 1000003ull * i, DType::f64);
    if (outputs[i].requires_grad()) {
      roots.push_back(outputs[i]);
      root_grads.push_back(weights[i].to(outputs[i].dtype()));
    }
  }
  if (!roots.empty()) backward(roots, root_grads);

  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Tensor& leaf = leaves[i];
    if (!leaf.defined() || !leaf.requires_grad()) continue;
    const Tensor analytic = leaf.grad().defined() ? leaf.grad() : Tensor::zeros(leaf.shape(), DType::f64);
    for (std::int64_t j = 0; j < leaf.numel(); ++j) {
      const double original = leaf.at(j);
      leaf.set(j, original + options.eps);
      const double plus = weighted_sum(fn(leaves), weights);
      leaf.set(j, original - options.eps);
      const double minus = weighted_sum(fn(leaves), weights);
      leaf.set(j, original);

      const double numeric = (plus - minus) / (2 * options.eps);
      const double a = analytic.at(j);
      const double err = std::abs(a - numeric);
      result.max_abs_error = std::max(result.max_abs_error, err);
      ++result.elements_checked;
      if (!(err <= options.atol + options.rtol * std::abs(numeric)) && result.ok) {
        result.ok = false;
        result.message = fmt::format("input {} (shape {}) element {}: analytic {:.12g} vs numeric {:.12g} (|diff| {:.3g})",
                                     i, shape_str(leaf.shape()), j, a, numeric, err);
      }
    }
  }
  return result;
}

}  // namespace wf::autograd
