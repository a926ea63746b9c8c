#pragma once
// Linear: y = x · weightᵀ + bias, weight [out, in] (PyTorch's layout), bias zeros and the
// weight either GPT-2's normal(0, init_std²) or Xavier/Glorot uniform (DiT, ViT), whose bound
// √(6 / (in + out)) comes from the whole layer's fans, also when tensor parallelism splits it.
#include <cstdint>

#include "wallfacer/nn/module.h"

namespace wf::nn {

enum class WeightInit { normal, xavier_uniform };

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  double init_std = 0.02;  // normal init; init_std 0 makes a zero-initialised layer
  WeightInit weight_init = WeightInit::normal;
  std::uint64_t seed = 0;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, std::uint64_t seed = 0);

  // x [..., in] → [..., out]. Virtual: a tensor-parallel layer (LayerFactory) overrides it.
  virtual Tensor forward(const Tensor& x);
  // gelu(forward(x)) (an MLP's first projection). The plain layer runs it as one op (linear_gelu:
  // the same bits on the CPU, the GELU in the GEMM's epilogue where a backend fuses it); a subclass
  // that replaces forward (tensor parallelism) gets gelu(forward(x)) unless it overrides this too.
  virtual Tensor forward_gelu(const Tensor& x);
  // residual + forward(x) (a projection onto the residual stream; residual of the output's shape
  // and x's dtype). The plain layer runs it as one op (linear_add: add(residual, linear)'s bits on
  // the CPU, the add in the GEMM's epilogue where a backend fuses it). A subclass that replaces
  // forward gets add(residual, forward(x)) unless it overrides this too: a row-parallel layer must
  // not fuse, its partial products are summed (and its bias added) after the product.
  virtual Tensor forward_add(const Tensor& x, const Tensor& residual);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  // The whole layer's options: with tensor parallelism, weight() is this rank's slice of it.
  const LinearOptions& options() const { return options_; }

 protected:
  // For the tensor-parallel subclasses (parallel/tensor_parallel.h): `options` describe the
  // whole layer and this rank holds the slices of weight [out, in] and bias [out] that the two
  // shards say. Each slice is drawn as exactly that slice of the whole layer's initial weight
  // (init_shard), so a layer split over any number of ranks is the whole layer cut up.
  // A vocabulary head's weight shard may describe [rows > out, in] split by rows (the
  // vocabulary padded to split evenly; no bias): the padding rows are zeros.
  Linear(const LinearOptions& options, const ParameterShard& weight_shard, const ParameterShard& bias_shard);

 private:
  void check_in_features(const Tensor& x) const;
  // Whether forward is exactly linear(x, weight, bias), the plain layer's, so that the fused ops may
  // stand in for it; a subclass's forward (tensor parallelism: the input's collective, the output's
  // gather or sum) must not be skipped.
  bool plain() const;

  LinearOptions options_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace wf::nn
