#include "wallfacer/nn/timestep_embedder.h"

#include <cmath>

#include "wallfacer/ops/activation.h"

namespace wf::nn {
namespace {

// The timesteps as doubles, whatever their dtype.
std::vector<double> timesteps(const Tensor& t) {
  WF_CHECK(t.dim() == 1, "timestep embedding: t must be [batch], got {}", shape_str(t.shape()));
  const Tensor t64 = t.to(DType::f64);
  return std::vector<double>(t64.data<double>(), t64.data<double>() + t64.numel());
}

}  // namespace

Tensor timestep_frequency_embedding(const Tensor& t, std::int64_t channels, double max_period) {
  WF_CHECK(channels > 0 && channels % 2 == 0, "timestep embedding: channels must be positive and even, got {}", channels);
  const std::vector<double> times = timesteps(t);
  const std::int64_t batch = static_cast<std::int64_t>(times.size()), half = channels / 2;
  Tensor out = Tensor::empty({batch, channels}, DType::f32);
  float* o = out.data<float>();
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t k = 0; k < half; ++k) {
      const double freq = std::exp(-std::log(max_period) * static_cast<double>(k) / static_cast<double>(half));
      const double arg = times[static_cast<std::size_t>(b)] * freq;
      o[b * channels + k] = static_cast<float>(std::cos(arg));
      o[b * channels + half + k] = static_cast<float>(std::sin(arg));
    }
  }
  return out;
}

TimestepEmbedder::TimestepEmbedder(const TimestepEmbedderOptions& options) : Module(options.seed), options_(options) {
  const auto& o = options_;
  WF_CHECK(o.d_model > 0, "TimestepEmbedder: d_model must be positive, got {}", o.d_model);
  const LayerFactory& layers = layers_or_default(o.layers);
  // Replicated: the embedding is per sample, small, and every tensor-parallel rank needs all of it.
  fc1_ = register_module("fc1", layers.linear(LinearOptions{.in_features = o.frequency_channels,
                                                            .out_features = o.d_model,
                                                            .init_std = o.init_std,
                                                            .seed = child_seed("fc1")},
                                              LinearRole::replicated));
  fc2_ = register_module("fc2", layers.linear(LinearOptions{.in_features = o.d_model,
                                                            .out_features = o.d_model,
                                                            .init_std = o.init_std,
                                                            .seed = child_seed("fc2")},
                                              LinearRole::replicated));
}

Tensor TimestepEmbedder::forward(const Tensor& t) {
  Tensor e = timestep_frequency_embedding(t, options_.frequency_channels, options_.max_period);
  // Under mixed precision the layers compute in bf16: the embedding enters in the weights' compute dtype.
  const DType compute = compute_dtype(fc1_->weight().dtype());
  if (compute != e.dtype()) e = e.to(compute);
  return fc2_->forward(silu(fc1_->forward(e)));
}

}  // namespace wf::nn
