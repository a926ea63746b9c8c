#include "wallfacer/nn/linear.h"

#include <cmath>
#include <typeinfo>

#include "wallfacer/nn/init.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"

namespace wf::nn {

Linear::Linear(const LinearOptions& options)
    : Linear(options, ParameterShard::replicated({options.out_features, options.in_features}),
             ParameterShard::replicated({options.out_features})) {}

Linear::Linear(const LinearOptions& options, const ParameterShard& weight_shard, const ParameterShard& bias_shard)
    : Module(options.seed), options_(options) {
  WF_CHECK(options.in_features > 0 && options.out_features > 0,
           "Linear: in_features and out_features must be positive, got in={} out={}", options.in_features,
           options.out_features);
  // A vocabulary head split by tp may hold padding rows past out_features (zeros, no bias);
  // everything else describes exactly [out, in] and [out].
  const Shape& global = weight_shard.global_shape;
  const bool padded = global.size() == 2 && global[0] > options.out_features && global[1] == options.in_features &&
                      weight_shard.dim <= 0 && !options.bias;
  WF_CHECK((global == Shape({options.out_features, options.in_features}) || padded) &&
               bias_shard.global_shape == Shape({options.out_features}),
           "Linear(in={}, out={}): the weight shard ({}) and bias shard ({}) must describe [out, in] (or [rows > out, "
           "in] split by rows, without bias) and [out]",
           options.in_features, options.out_features, shard_str(weight_shard), shard_str(bias_shard));
  const std::uint64_t weight_seed = derive_seed(seed(), "weight");
  const bool xavier = options.weight_init == WeightInit::xavier_uniform;
  const double weight_std =
      xavier ? std::sqrt(2.0 / static_cast<double>(options.in_features + options.out_features)) : options.init_std;
  weight_ = register_parameter(
      "weight",
      padded ? normal_init_padded_rows(weight_shard, options.out_features, weight_seed, options.init_std)
             : init_shard(weight_shard, weight_seed, weight_std,
                          xavier ? InitDistribution::uniform : InitDistribution::normal),
      weight_shard);
  if (options.bias) bias_ = register_parameter("bias", Tensor::zeros(bias_shard.local_shape()), bias_shard);
}

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, std::uint64_t seed)
    : Linear(LinearOptions{.in_features = in_features, .out_features = out_features, .bias = bias, .seed = seed}) {}

void Linear::check_in_features(const Tensor& x) const {
  WF_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features,
           "Linear(in={}, out={}): input of shape {} must end in {} features", options_.in_features,
           options_.out_features, shape_str(x.shape()), options_.in_features);
}

Tensor Linear::forward(const Tensor& x) {
  check_in_features(x);
  // Under bf16 mixed precision x is bf16 and the weight its f32 master: linear() multiplies in
  // bf16 and hands the master its gradient in f32 (ops/linalg.h), with no cast node between.
  return linear(x, weight_, bias_);
}

bool Linear::plain() const { return typeid(*this) == typeid(Linear); }

Tensor Linear::forward_gelu(const Tensor& x) {
  if (!plain()) return gelu(forward(x));
  check_in_features(x);
  return linear_gelu(x, weight_, bias_);
}

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual) {
  if (!plain()) return add(residual, forward(x));
  check_in_features(x);
  return linear_add(x, weight_, bias_, residual);
}

}  // namespace wf::nn
