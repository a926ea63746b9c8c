#pragma once
// Deterministic, layout-independent parameter initialisation.
//
// Every module has a 64-bit seed. A parameter named "weight" of a module with seed s is drawn
// from the counter-based stream derive_seed(s, "weight"): element k of the full (unsharded)
// tensor is stream element k, whatever the process, thread count or construction order. A
// child module's seed is derive_seed(parent seed, child name), so a whole model is a pure
// function of its root seed and its structure.
//
// This is what lets a tensor-parallel rank draw exactly its shard of a matrix: rows
// [r0, r1) of a [out, in] weight are
//   Tensor::randn_at({r1 - r0, in}, derive_seed(s, "weight"), r0 * in)   (times the std).
#include <cstdint>
#include <string_view>

#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/parameter_shard.h"

namespace wf::nn {

// A stable hash of (parent seed, name): FNV-1a over the name, mixed with the parent by
// SplitMix64. Never changes between releases: checkpoints and golden tests depend on it.
std::uint64_t derive_seed(std::uint64_t parent_seed, std::string_view name);

// The distribution a parameter is drawn from: normal(0, std²), or uniform on [−√3·std, √3·std)
// (the same std; Xavier/Glorot uniform is std = √(2 / (fan_in + fan_out))).
enum class InitDistribution { normal, uniform };

// normal(0, std²) in f32, element k = std · normal_at(stream_seed, first_index + k).
Tensor normal_init(const Shape& shape, std::uint64_t stream_seed, double std, std::uint64_t first_index = 0);
// uniform, element k = √3·std · (2·uniform_at(stream_seed, first_index + k) − 1).
Tensor uniform_init(const Shape& shape, std::uint64_t stream_seed, double std, std::uint64_t first_index = 0);
Tensor random_init(InitDistribution distribution, const Shape& shape, std::uint64_t stream_seed, double std,
                   std::uint64_t first_index = 0);

// Indices [start, start + length) of dim `dim` of random_init(distribution, global_shape, stream_seed, std),
// bit for bit, without drawing the rest. Along dim 0 that is one contiguous run of the stream;
// along a later dim the slice is strided (columns [c0, c1) of a matrix are one run per row), so
// it is drawn run by run at each run's stream index. Negative dims count from the end.
Tensor init_slice(const Shape& global_shape, std::int64_t dim, std::int64_t start, std::int64_t length,
                  std::uint64_t stream_seed, double std, InitDistribution distribution = InitDistribution::normal);
// This rank's slice of a parameter described by `shard` (the whole tensor when replicated).
Tensor init_shard(const ParameterShard& shard, std::uint64_t stream_seed, double std,
                  InitDistribution distribution = InitDistribution::normal);
// The same for a table whose shard may extend past its `real_rows` (a vocabulary padded to split
// evenly over tp): element k of the stream is element k whatever the row count, so the real
// rows are the unpadded table's bit for bit; rows >= real_rows are zeros. `shard` is whole or
// split along dim 0.
Tensor normal_init_padded_rows(const ParameterShard& shard, std::int64_t real_rows, std::uint64_t stream_seed,
                               double std);

}  // namespace wf::nn
