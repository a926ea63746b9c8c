#pragma once
// Normalisation over the last dim: LayerNorm and RMSNorm, behind one interface so that a
// block can take either (NormType).
#include <cstdint>
#include <memory>
#include <utility>

#include "wallfacer/nn/module.h"
#include "wallfacer/ops/norm.h"

namespace wf::nn {

// A module mapping [..., dim] to [..., dim].
class Normalization : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  // A pre-norm block's residual add and this norm: {sum = x + branch, forward(sum)}. LayerNorm and
  // RMSNorm fuse the two into one pass (add_layer_norm / add_rms_norm), bitwise the same.
  virtual AddNorm forward_add(const Tensor& x, const Tensor& branch);
};

struct LayerNormOptions {
  std::int64_t dim = 0;
  double eps = 1e-5;
  bool affine = true;  // learnable weight (ones) and bias (zeros)
};

class LayerNorm : public Normalization {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  AddNorm forward_add(const Tensor& x, const Tensor& branch) override;

  const Tensor& weight() const { return weight_; }  // undefined when not affine
  const Tensor& bias() const { return bias_; }
  const LayerNormOptions& options() const { return options_; }

 private:
  // The weight and bias the op takes for input x: the parameters, or a constant unit scale and
  // zero shift when not affine.
  std::pair<Tensor, Tensor> affine_for(const Tensor& x) const;

  LayerNormOptions options_;
  Tensor weight_;
  Tensor bias_;
};

struct RMSNormOptions {
  std::int64_t dim = 0;
  double eps = 1e-6;
};

class RMSNorm : public Normalization {
 public:
  explicit RMSNorm(const RMSNormOptions& options);
  explicit RMSNorm(std::int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) override;
  AddNorm forward_add(const Tensor& x, const Tensor& branch) override;

  const Tensor& weight() const { return weight_; }
  const RMSNormOptions& options() const { return options_; }

 private:
  RMSNormOptions options_;
  Tensor weight_;
};

enum class NormType { layer_norm, rms_norm };
const char* norm_type_name(NormType type);
// LayerNorm (affine) or RMSNorm over `dim`.
std::shared_ptr<Normalization> make_norm(NormType type, std::int64_t dim, double eps);
// The parameters make_norm's module holds: weight and bias (LayerNorm), or weight (RMSNorm).
double norm_parameter_count(NormType type, std::int64_t dim);

}  // namespace wf::nn
