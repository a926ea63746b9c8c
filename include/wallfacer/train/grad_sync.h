#pragma once
// Gradient synchronisation of replicated weights.
//
// Under data and sequence parallelism every rank holds the same weights and computes their
// gradient from its own tokens only; the full gradient is the SUM over the ranks that replicate
// them (the dp × sp group, "dp_sp"), because each rank's loss is already divided by the token
// count of the whole global batch (models/model.h). Gradients are packed into buckets of about
// `bucket_bytes` so a model with hundreds of parameters makes a few large all-reduces instead of
// hundreds of small ones.
#include <cstdint>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"

namespace wf::train {

inline constexpr std::int64_t kDefaultBucketBytes = 25 << 20;  // 25 MiB, as PyTorch DDP

// Sums every parameter's gradient over `group` in place. A parameter without a gradient takes
// part with zeros (and gets a zero gradient), so every rank makes the same calls. Buckets hold
// parameters of one dtype, in parameter order; a parameter larger than a bucket gets its own.
void all_reduce_gradients(comm::Group& group, const std::vector<Tensor>& params,
                          std::int64_t bucket_bytes = kDefaultBucketBytes);

}  // namespace wf::train
