#pragma once
// FlatLayout: where every parameter of a rank lives in flat per-dtype buffers, how those buffers
// are cut into gradient buckets, and which part of each bucket each replica owns under ZeRO.
// Pure arithmetic on (numel, dtype) lists, like comm::ProcessGrid: the same inputs give the same
// layout on every rank, which is what lets the replicas post the same collectives in the same
// order and lets the tensor-parallel ranks (whose shards have equal shapes) agree on it too.
//
//   buffer of one dtype:  | bucket 0 | bucket 1 | ...          (bucket 0 = the LAST parameters)
//   bucket b:             | p_k | p_k-1 | ... | pad |          numel a multiple of `replicas`
//   replica r owns:       [offset_b + r·chunk_b, offset_b + (r+1)·chunk_b), chunk_b = numel_b / replicas
//
// Buckets take parameters in REVERSE order (the backward produces the last layers' gradients
// first, so their buckets fill first), hold one dtype and at most `bucket_bytes` of parameters,
// except that a parameter larger than that gets a bucket of its own. Each bucket is padded with
// zeros to a multiple of `replicas` so that a reduce-scatter splits it evenly (Megatron's
// distributed optimizer does the same); with replicas = 1 nothing is padded.
//
// With `split_parameters` (ZeRO-2, whose staging buffers are whole buckets: a bucket must be
// small against the model) a parameter may span buckets instead: every bucket of a dtype but its
// last holds exactly bucket_bytes rounded down to a multiple of `replicas` elements, so no padding
// falls inside a parameter, and a replica may own several ranges of one parameter.
//
// An `isolated` parameter gets buckets of its own, laid after all the others of its dtype: which
// of its elements each replica owns then depends on its size alone. Two layouts of different
// parameter sets (the first and the last pipeline stage, which both hold the tied embedding) thus
// split it identically, and its owned pieces can be summed element for element across them.
//
// The gradients of the replicas (ZeRO-0: every replica reduces every bucket in place), the
// shards of ZeRO-1/2 (replica r reduce-scatters bucket b into its chunk, updates the parameters'
// elements in that chunk, and all-gathers the bucket), the optimizer's slots and the
// checkpoint's pieces (train/sharded_tensor.h) are all read off this one description.
#include <cstdint>
#include <utility>
#include <vector>

#include "wallfacer/core/dtype.h"
#include "wallfacer/core/tensor.h"

namespace wf::train {

class FlatLayout {
 public:
  struct Param {
    std::int64_t numel = 0;
    DType dtype = DType::f32;
    // In buckets of its own, after every other parameter of its dtype (see above).
    bool isolated = false;
  };
  // One parameter's place: buffer `buffer`, elements [offset, offset + numel).
  struct Slot {
    std::size_t buffer = 0;
    std::vector<std::size_t> buckets;  // the buckets it lies in, in element order (one unless split)
    std::int64_t offset = 0;
    std::int64_t numel = 0;
  };
  struct Bucket {
    std::size_t buffer = 0;
    std::int64_t offset = 0;  // in the buffer
    std::int64_t numel = 0;   // padded: a multiple of replicas
    std::vector<std::size_t> params;  // those with elements in it, in the order they sit in it
    std::int64_t chunk = 0;           // numel / replicas: what each replica owns of it
    std::int64_t shard_offset = 0;    // where one replica's chunk sits in the buffer's shard
  };
  struct Buffer {
    DType dtype = DType::f32;
    std::int64_t numel = 0;        // all its buckets, padding included
    std::int64_t shard_numel = 0;  // one replica's chunks of all its buckets: numel / replicas
  };
  // The part of parameter k a replica owns: its elements [begin, end) (row-major), which sit at
  // [shard_offset, shard_offset + end - begin) of the buffer's shard. Empty when begin == end.
  struct Owned {
    std::int64_t begin = 0;
    std::int64_t end = 0;
    std::int64_t shard_offset = 0;
    bool empty() const { return begin == end; }
  };

  FlatLayout() = default;
  // wf::Error for bucket_bytes <= 0, replicas < 1 or a parameter without elements.
  FlatLayout(const std::vector<Param>& params, std::int64_t bucket_bytes, int replicas, bool split_parameters = false);

  int replicas() const { return replicas_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<Slot>& slots() const { return slots_; }
  // Parameter k's elements that replica `replica` owns (ZeRO): one range per bucket it lies in,
  // the empty ones left out.
  std::vector<Owned> owned(std::size_t param, int replica) const;
  // The elements of parameter k that lie in `bucket`: [begin, end) of the parameter.
  std::pair<std::int64_t, std::int64_t> part_in(std::size_t param, std::size_t bucket) const;

 private:
  int replicas_ = 1;
  std::vector<Buffer> buffers_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
};

// The (numel, dtype) of each tensor, what a FlatLayout is planned from.
std::vector<FlatLayout::Param> flat_layout_params(const std::vector<Tensor>& params);

// The ZeRO stage a replica group of `replicas` ranks runs: a group of one shards nothing (0).
inline int effective_zero_stage(int replicas, int zero) { return replicas > 1 ? zero : 0; }
// The dtype a buffer of `gradients` travels in over the replica group (ReplicaGradients, and
// step_traffic.h's prediction of it): f32 gradients in `reduce_dtype` (parallel.grad_reduce_dtype,
// f32 or bf16), any other dtype as itself.
inline DType gradient_wire_dtype(DType gradients, DType reduce_dtype) {
  return gradients == DType::f32 ? reduce_dtype : gradients;
}
// The layout of the Trainer's gradients (ReplicaGradients) at ZeRO stage `zero` (effective, as
// above) over `replicas` ranks: chunks for the replicas from stage 1 on, and buckets cut through
// parameters at stage 2, whose staging buffers are whole buckets. The one place that rule lives,
// for the reduction and its traffic prediction alike.
// `isolated`: indices of parameters laid out as FlatLayout::Param::isolated.
FlatLayout replica_layout(const std::vector<Tensor>& params, std::int64_t bucket_bytes, int replicas, int zero,
                          const std::vector<std::size_t>& isolated = {});

}  // namespace wf::train
