#include "kernels/cpu/timestep_embedding.h"

#include <cmath>

namespace wf::kernels::cpu {

void timestep_embedding(std::int64_t batch, std::int64_t channels, double max_period, const double* times,
                        float* out) {
  const std::int64_t half = channels / 2;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t k = 0; k < half; ++k) {
      const double freq = std::exp(-std::log(max_period) * static_cast<double>(k) / static_cast<double>(half));
      const double arg = times[b] * freq;
      out[b * channels + k] = static_cast<float>(std::cos(arg));
      out[b * channels + half + k] = static_cast<float>(std::sin(arg));
    }
  }
}

void timestep_embedding_reference(std::int64_t batch, std::int64_t channels, double max_period, const double* times,
                                  float* out) {
  const std::int64_t half = channels / 2;
  for (std::int64_t i = 0; i < batch * channels; ++i) {
    const std::int64_t k = (i % channels) % half;
    const double arg = times[i / channels] * std::pow(max_period, -static_cast<double>(k) / static_cast<double>(half));
    out[i] = static_cast<float>(i % channels < half ? std::cos(arg) : std::sin(arg));
  }
}

}  // namespace wf::kernels::cpu
