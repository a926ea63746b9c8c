#include "wallfacer/nn/init.h"

namespace wf::nn {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xCBF29CE484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

}  // namespace

std::uint64_t derive_seed(std::uint64_t parent_seed, std::string_view name) {
  // Two rounds so that neither a seed nor a name alone decides the result.
  return splitmix64(splitmix64(parent_seed) ^ fnv1a(name));
}

Tensor normal_init(const Shape& shape, std::uint64_t stream_seed, double std, std::uint64_t first_index) {
  WF_CHECK(std >= 0.0, "normal_init: std must be >= 0, got {}", std);
  Tensor t = Tensor::randn_at(shape, stream_seed, first_index, DType::f32);
  float* p = t.data<float>();
  const float s = static_cast<float>(std);
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] *= s;
  return t;
}

}  // namespace wf::nn
