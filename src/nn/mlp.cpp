#include "wallfacer/nn/mlp.h"

#include "wallfacer/ops/activation.h"

namespace wf::nn {

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::gelu: return "gelu";
    case Activation::silu: return "silu";
  }
  return "unknown";
}

Tensor activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::gelu: return gelu(x);
    case Activation::silu: return silu(x);
  }
  WF_FAIL("activate: unknown activation {}", static_cast<int>(activation));
}

MLP::MLP(const MLPOptions& options) : Module(options.seed), options_(options) {
  WF_CHECK(options.d_model > 0 && options.d_ff >= 0, "MLP: d_model must be positive and d_ff >= 0, got {} and {}",
           options.d_model, options.d_ff);
  if (options_.d_ff == 0) options_.d_ff = 4 * options_.d_model;
  const double out_std = options.out_init_std > 0 ? options.out_init_std : options.init_std;
  fc_ = register_module("fc", std::make_shared<Linear>(LinearOptions{.in_features = options_.d_model,
                                                                     .out_features = options_.d_ff,
                                                                     .bias = options.bias,
                                                                     .init_std = options.init_std,
                                                                     .seed = child_seed("fc")}));
  proj_ = register_module("proj", std::make_shared<Linear>(LinearOptions{.in_features = options_.d_ff,
                                                                         .out_features = options_.d_model,
                                                                         .bias = options.bias,
                                                                         .init_std = out_std,
                                                                         .seed = child_seed("proj")}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(options.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  return dropout_->forward(proj_->forward(activate(options_.activation, fc_->forward(x))));
}

}  // namespace wf::nn
