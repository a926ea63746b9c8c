#include "wallfacer/nn/linear.h"

#include "wallfacer/ops/linalg.h"

namespace wf::nn {

Linear::Linear(const LinearOptions& options) : Module(options.seed), options_(options) {
  WF_CHECK(options.in_features > 0 && options.out_features > 0,
           "Linear: in_features and out_features must be positive, got in={} out={}", options.in_features,
           options.out_features);
  weight_ = register_parameter("weight",
                               init_normal("weight", {options.out_features, options.in_features}, options.init_std));
  if (options.bias) bias_ = register_parameter("bias", Tensor::zeros({options.out_features}));
}

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, std::uint64_t seed)
    : Linear(LinearOptions{.in_features = in_features, .out_features = out_features, .bias = bias, .seed = seed}) {}

Tensor Linear::forward(const Tensor& x) {
  WF_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features,
           "Linear(in={}, out={}): input of shape {} must end in {} features", options_.in_features,
           options_.out_features, shape_str(x.shape()), options_.in_features);
  return linear(x, weight_, bias_);
}

}  // namespace wf::nn
