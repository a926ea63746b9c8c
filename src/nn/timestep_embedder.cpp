#include "wallfacer/nn/timestep_embedder.h"

#include "src/ops/common.h"
#include "wallfacer/ops/activation.h"

namespace wf::nn {

Tensor timestep_frequency_embedding(const Tensor& t, std::int64_t channels, double max_period) {
  WF_CHECK(channels > 0 && channels % 2 == 0, "timestep embedding: channels must be positive and even, got {}", channels);
  WF_CHECK(t.dim() == 1, "timestep embedding: t must be [batch], got {}", shape_str(t.shape()));
  const Tensor times = t.to(DType::f64);  // whatever their dtype, on their device
  const ops::Kernels k = ops::kernels_for("timestep embedding", {times});
  Tensor out = Tensor::empty({times.numel(), channels}, DType::f32, k.device());
  k->timestep_embedding(k.stream, times.numel(), channels, max_period, times.data<double>(), out.data<float>());
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
