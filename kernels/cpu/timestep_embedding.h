#pragma once
// The sinusoidal timestep embedding of DiT's timestep embedder (nn/timestep_embedder.h), after
// ADM / GLIDE: for k < half = channels/2,
//
//   freq_k = exp(−ln(max_period) · k / half)
//   out[b] = [cos(t_b · freq_0 … freq_{half−1}), sin(t_b · freq_0 … freq_{half−1})]   (cos first)
//
// computed in f64 (t reaches 999; in f32 its arguments would carry 1e-4 absolute error) and
// rounded once to f32. channels must be even.
#include <cstdint>

namespace wf::kernels::cpu {

void timestep_embedding(std::int64_t batch, std::int64_t channels, double max_period, const double* times,
                        float* out /*[batch, channels]*/);

// ---- reference: every element from the formula, the frequency as max_period^(−k/half) --------
void timestep_embedding_reference(std::int64_t batch, std::int64_t channels, double max_period, const double* times,
                                  float* out);

}  // namespace wf::kernels::cpu
