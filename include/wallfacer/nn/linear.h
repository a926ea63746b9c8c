#pragma once
// Linear: y = x · weightᵀ + bias, weight [out, in] (PyTorch's layout), GPT-2 initialisation:
// weight ~ normal(0, init_std²), bias zeros.
#include <cstdint>

#include "wallfacer/nn/module.h"

namespace wf::nn {

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  double init_std = 0.02;
  std::uint64_t seed = 0;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, std::uint64_t seed = 0);

  // x [..., in] → [..., out]. Virtual: a tensor-parallel layer (LayerFactory) overrides it.
  virtual Tensor forward(const Tensor& x);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  const LinearOptions& options() const { return options_; }

 private:
  LinearOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace wf::nn
