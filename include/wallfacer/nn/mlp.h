#pragma once
// MLP: the transformer feed-forward, fc (d_model → d_ff) → activation → proj (d_ff → d_model)
// → dropout.
#include <cstdint>
#include <memory>

#include "wallfacer/nn/dropout.h"
#include "wallfacer/nn/linear.h"

namespace wf::nn {

enum class Activation { gelu, silu };
const char* activation_name(Activation activation);
// Applies the activation (differentiable).
Tensor activate(Activation activation, const Tensor& x);

struct MLPOptions {
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;  // 0 → 4·d_model
  Activation activation = Activation::gelu;
  double dropout = 0.0;
  bool bias = true;
  double init_std = 0.02;
  // Init std of the output projection, which writes into the residual stream; GPT-2 uses
  // 0.02/√(2·n_layer). 0 → init_std.
  double out_init_std = 0.0;
  std::uint64_t seed = 0;
};

class MLP : public Module {
 public:
  explicit MLP(const MLPOptions& options);
  // x [..., d_model] → [..., d_model]
  Tensor forward(const Tensor& x);

  Linear& fc() { return *fc_; }
  Linear& proj() { return *proj_; }
  const MLPOptions& options() const { return options_; }

 private:
  MLPOptions options_;
  std::shared_ptr<Linear> fc_;
  std::shared_ptr<Linear> proj_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace wf::nn
