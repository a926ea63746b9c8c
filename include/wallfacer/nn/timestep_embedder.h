#pragma once
// The diffusion timestep embedder of DiT (after ADM / GLIDE): a fixed sinusoidal embedding of a
// scalar timestep followed by a two-layer MLP,
//
//   freq_k = exp(−ln(max_period) · k / half),  k < half = channels / 2
//   e(t)   = [cos(t · freq_0 … freq_{half−1}), sin(t · freq_0 … freq_{half−1})]   (cos first)
//   out    = fc2(SiLU(fc1(e(t))))                                     fc1: channels → d, fc2: d → d
//
// The sinusoid is computed in f64 and rounded once (t reaches 999; in f32 its arguments would
// carry 1e-4 absolute error). Parameter names: fc1.{weight,bias}, fc2.{weight,bias}.
#include <cstdint>
#include <memory>

#include "wallfacer/nn/layer_factory.h"

namespace wf::nn {

// t [B] (any float or integer dtype; continuous times allowed) → [B, channels] f32, constant.
// channels must be even.
Tensor timestep_frequency_embedding(const Tensor& t, std::int64_t channels = 256, double max_period = 10000.0);

struct TimestepEmbedderOptions {
  std::int64_t d_model = 0;
  std::int64_t frequency_channels = 256;
  double max_period = 10000.0;
  double init_std = 0.02;  // DiT: normal(0, 0.02²) for both layers
  std::uint64_t seed = 0;
  std::shared_ptr<const LayerFactory> layers = nullptr;
};

class TimestepEmbedder : public Module {
 public:
  explicit TimestepEmbedder(const TimestepEmbedderOptions& options);
  // t [B] → [B, d_model].
  Tensor forward(const Tensor& t);

 private:
  TimestepEmbedderOptions options_;
  std::shared_ptr<Linear> fc1_;
  std::shared_ptr<Linear> fc2_;
};

}  // namespace wf::nn
