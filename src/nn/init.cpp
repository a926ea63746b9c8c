#include "wallfacer/nn/init.h"

#include <algorithm>
#include <cmath>

// Host-side setup: every initialiser here draws from the layout-independent counter RNG
// (Tensor::randn_at / rand_at, which fill host memory) and shapes the draws on the host, before
// any tensor moves to a device. They return CPU tensors; the caller moves parameters with
// `.to(device)`. That keeps a parameter's values one function of (seed, global index) whatever
// the device, so these loops are not step arithmetic and stay out of kernels/.
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

Tensor uniform_init(const Shape& shape, std::uint64_t stream_seed, double std, std::uint64_t first_index) {
  WF_CHECK(std >= 0.0, "uniform_init: std must be >= 0, got {}", std);
  Tensor t = Tensor::rand_at(shape, stream_seed, first_index, DType::f32);
  float* p = t.data<float>();
  const float bound = static_cast<float>(std::sqrt(3.0) * std);  // uniform(−a, a) has std a/√3
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = bound * (2.0f * p[i] - 1.0f);
  return t;
}

Tensor random_init(InitDistribution distribution, const Shape& shape, std::uint64_t stream_seed, double std,
                   std::uint64_t first_index) {
  return distribution == InitDistribution::uniform ? uniform_init(shape, stream_seed, std, first_index)
                                                   : normal_init(shape, stream_seed, std, first_index);
}

Tensor init_slice(const Shape& global_shape, std::int64_t dim, std::int64_t start, std::int64_t length,
                  std::uint64_t stream_seed, double std, InitDistribution distribution) {
  const auto ndim = static_cast<std::int64_t>(global_shape.size());
  WF_CHECK(dim >= -ndim && dim < ndim, "init_slice: dim {} is out of range for shape {}", dim,
           shape_str(global_shape));
  const std::int64_t d = normalize_dim(dim, ndim);
  const std::int64_t extent = global_shape[static_cast<std::size_t>(d)];
  WF_CHECK(start >= 0 && length >= 0 && start + length <= extent,
           "init_slice: [{}, {}) is not within dim {} (extent {}) of shape {}", start, start + length, d, extent,
           shape_str(global_shape));
  // The whole tensor as [outer, extent, inner]: the slice is `outer` runs of length·inner
  // elements, run o starting at stream index (o·extent + start)·inner.
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < d; ++i) outer *= global_shape[static_cast<std::size_t>(i)];
  for (std::int64_t i = d + 1; i < ndim; ++i) inner *= global_shape[static_cast<std::size_t>(i)];
  Shape local = global_shape;
  local[static_cast<std::size_t>(d)] = length;
  if (outer == 1) return random_init(distribution, local, stream_seed, std, static_cast<std::uint64_t>(start * inner));

  Tensor out = Tensor::empty(local, DType::f32);
  const std::int64_t run = length * inner;
  float* p = out.data<float>();
  for (std::int64_t o = 0; o < outer; ++o) {
    // Each run through random_init itself, so the values are its values exactly.
    const Tensor part =
        random_init(distribution, {run}, stream_seed, std, static_cast<std::uint64_t>((o * extent + start) * inner));
    std::copy_n(part.data<float>(), run, p + o * run);
  }
  return out;
}

Tensor init_shard(const ParameterShard& shard, std::uint64_t stream_seed, double std, InitDistribution distribution) {
  if (!shard.is_sharded()) return random_init(distribution, shard.global_shape, stream_seed, std);
  return init_slice(shard.global_shape, shard.dim, shard.start(), shard.length(), stream_seed, std, distribution);
}

Tensor normal_init_padded_rows(const ParameterShard& shard, std::int64_t real_rows, std::uint64_t stream_seed,
                               double std) {
  WF_CHECK(shard.global_shape.size() == 2 && shard.dim <= 0 && real_rows <= shard.global_shape[0],
           "normal_init_padded_rows: the shard ({}) must be a whole or row-split matrix of at least {} rows",
           shard_str(shard), real_rows);
  Tensor w = init_shard(shard, stream_seed, std);
  const std::int64_t cols = shard.global_shape[1];
  const std::int64_t first_pad = std::clamp(real_rows - shard.start(), std::int64_t{0}, w.size(0));
  std::fill(w.data<float>() + first_pad * cols, w.data<float>() + w.numel(), 0.0f);
  return w;
}

}  // namespace wf::nn
