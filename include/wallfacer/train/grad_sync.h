#pragma once
// Gradient synchronisation of replicated weights.
//
// Under data and sequence parallelism the ranks of a dp × sp group ("dp_sp": the same tp and pp
// coordinate) hold the same weights, or the same tensor-parallel shards of them, and compute
// their gradient from their own tokens only; the full gradient is the SUM over that group; each rank's loss is a sum, and normalise_gradients divides by
// the element count of the whole global batch once (models/model.h). Gradients are packed into buckets of about
// `bucket_bytes` so a model with hundreds of parameters makes a few large all-reduces instead of
// hundreds of small ones.
//
// all_reduce_gradients below packs the buckets of any parameter list after the backward
// (ParallelTraining, for a model an embedding program trains itself). The Trainer keeps its
// gradients in flat buffers instead and reduces the same buckets in place, overlapped with the
// backward and optionally sharded (ZeRO): replica_gradients.h; both plan buckets with FlatLayout.
#include <cstdint>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"

namespace wf::config {
struct RunConfig;
}  // namespace wf::config

namespace wf::train {

inline constexpr std::int64_t kDefaultBucketBytes = 25 << 20;  // 25 MiB, as PyTorch DDP
// The Trainer's bucket size: parallel.grad_bucket_mb in bytes.
std::int64_t gradient_bucket_bytes(const config::RunConfig& config);

// One bucket: parameter indices, packed one after the other in this order; all of one dtype.
struct GradBucket {
  std::vector<std::size_t> params;
  DType dtype = DType::f32;
  std::int64_t numel = 0;
};

// Buckets in REVERSE parameter order (the backward produces the last layers' gradients first,
// so their buckets are complete first), each of one dtype and at most `bucket_bytes`, except
// that a parameter larger than a bucket gets one of its own.
std::vector<GradBucket> plan_gradient_buckets(const std::vector<Tensor>& params, std::int64_t bucket_bytes);

// The bucket's gradients packed into a new flat tensor (zeros for a parameter without one).
Tensor pack_gradients(const GradBucket& bucket, const std::vector<Tensor>& params);
// Copies `packed` back into the gradients, giving a parameter without one a gradient.
void unpack_gradients(const GradBucket& bucket, const Tensor& packed, const std::vector<Tensor>& params);

// Sums every parameter's gradient over `group` in place, one blocking all-reduce per bucket of
// plan_gradient_buckets. A parameter without a gradient takes part with zeros (and gets the
// sum), so every rank makes the same calls. Nothing to do on a group of one.
void all_reduce_gradients(comm::Group& group, const std::vector<Tensor>& params,
                          std::int64_t bucket_bytes = kDefaultBucketBytes);

// A loss sum and the number of elements counted into it, over microbatches (and ranks).
struct LossTotals {
  double sum = 0, count = 0;
  void add(double loss_sum, std::int64_t elements) {
    sum += loss_sum;
    count += static_cast<double>(elements);
  }
  // The mean over the counted elements; 0 when none was counted (every target ignored).
  double mean() const { return count > 0 ? sum / count : 0.0; }
};
// The totals summed over `group` (one all-reduce of both).
LossTotals sum_over(comm::Group& group, LossTotals local);

// After the gradients of loss SUMS were summed over `group`: sums the loss totals over `group`,
// divides every gradient by the global count (Megatron's per-token loss normalisation) and
// returns the global mean loss. With a global count of 0 (every target ignored) the loss and the
// gradients are 0.
double normalise_gradients(comm::Group& group, const std::vector<Tensor>& params, LossTotals local);

}  // namespace wf::train
