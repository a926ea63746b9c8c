#pragma once
// ReplicaGradients: the gradients of the weights the replica group (dp × sp, one per tp
// coordinate) holds alike, their reduction over that group during the backward, and the ZeRO
// sharding of gradients, optimizer state and the parameter update.
//
// Every gradient lives in a persistent flat buffer per dtype (FlatLayout, flat_layout.h): a
// parameter's grad() is a view into it, a bucket is a contiguous range of it, and a collective
// runs on the bucket in place: no pack or unpack copies, the same buffers every step.
//
//   zero 0  every replica all-reduces every bucket (DDP); the optimizer updates whole parameters.
//   zero 1  each bucket is reduce-scattered: replica r receives the sum of its chunk only, the
//           optimizer holds state for and updates only those elements (views into the
//           parameters, which live in a flat buffer of their own), and the updated buckets are
//           all-gathered. Optimizer state is 1/R of ZeRO-0's.
//   zero 2  gradients are sharded as well: no full-size gradient buffer persists. As a
//           parameter's gradient becomes final it is copied into its bucket's staging buffer
//           (a small pool, reused) and freed; a complete bucket is reduce-scattered at once
//           into this replica's gradient shard, in every microbatch's backward.
//
// Overlap: each parameter gets a "gradient ready" hook (autograd/grad_hooks.h), which the engine
// fires once per backward when the parameter's gradient is complete; parameters the backward
// never reaches (autograd::outermost_backward_reaches) are final from its first hook on. A
// bucket whose parameters are all ready starts its collective at once (non-blocking); buckets
// start strictly in order, so every replica posts the same collectives in the same order
// whatever the timing. With overlap off, everything starts in end_backward().
//
//   grads.begin_backward(last); backward(loss); grads.end_backward();   for each microbatch
//   ... optimizer over grads.optimizer_params() ...; grads.gather_parameters(); grads.zero_grad();
//
// One instance per set of parameters (hooks are per leaf). Not thread-safe; the hooks run on the
// backward's thread.
#include <cstdint>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/train/flat_layout.h"
#include "wallfacer/train/grad_sync.h"

namespace wf::train {

struct ReplicaGradientOptions {
  int zero = 0;  // ZeRO stage: 0, 1 or 2
  std::int64_t bucket_bytes = kDefaultBucketBytes;
  bool overlap = true;  // start collectives from the backward's ready hooks
  // ZeRO-2: how many bucket staging buffers may be in use before the oldest collective is waited
  // for: two let one bucket fill while the previous one is reduced.
  int staging_buffers = 2;
  // The dtype f32 gradients travel in: f32, or bf16 (parallel.grad_reduce_dtype), which halves
  // the bytes: each bucket is rounded to bf16 for its collective, summed with every combine in
  // f32 (comm/group.h), and widened back into the f32 gradients. Accumulation over microbatches
  // and the optimizer stay f32.
  DType reduce_dtype = DType::f32;
  // Parameters in buckets of their own (FlatLayout::Param::isolated): the tied embedding of a
  // pipeline's first and last stage, whose pieces are then summed over the pp.embedding group.
  std::vector<std::size_t> isolated = {};
};

class ReplicaGradients {
 public:
  // `params` as the model lists them (all on the CPU). With ZeRO ≥ 1 the parameters are moved
  // into a flat buffer (their storage becomes a view of it; values unchanged). A group of one
  // rank reduces nothing and shards nothing (its stage is 0 whatever the option says).
  ReplicaGradients(comm::Group& replicas, std::vector<Tensor> params, ReplicaGradientOptions options);
  ~ReplicaGradients();  // removes the hooks, completes what is still in flight
  ReplicaGradients(const ReplicaGradients&) = delete;
  ReplicaGradients& operator=(const ReplicaGradients&) = delete;

  int zero() const { return stage_; }
  const FlatLayout& layout() const { return layout_; }

  // What the optimizer updates: one tensor per piece, with its gradient bound. ZeRO-0: the
  // parameters themselves. ZeRO ≥ 1: 1-D views of the elements of each parameter this replica
  // owns (parameters it owns nothing of are absent; under ZeRO-2, whose buckets cut through
  // parameters, one per bucket a parameter lies in, so a parameter may have several).
  struct Piece {
    std::size_t param = 0;
    std::int64_t begin = 0, end = 0;  // the parameter's row-major elements
  };
  const std::vector<Tensor>& optimizer_params() const { return optimizer_params_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

  // Around each microbatch's backward. After the last one's end_backward the optimizer params'
  // gradients hold the SUM over the replica group (of the loss sums' gradients).
  void begin_backward(bool last_microbatch);
  void end_backward();
  // ZeRO ≥ 1, after the optimizer step: every replica's updated chunks are all-gathered, so each
  // holds the whole updated parameters again. Nothing to do at ZeRO-0.
  void gather_parameters();
  // Gradients to zero for the next step (the buffers stay; views stay bound).
  void zero_grad();

  // Bytes this rank holds for gradients: the flat buffer (ZeRO 0, 1), the shard (ZeRO 1, 2) and
  // the staging pool (ZeRO 2: at most staging_buffers × the largest bucket, kept for reuse).
  std::int64_t gradient_bytes() const;
  // The same without the staging pool: what persists between backwards.
  std::int64_t persistent_gradient_bytes() const;

  struct Stats {
    std::int64_t buckets = 0;
    std::int64_t launched_in_backward = 0;  // by a ready hook
    std::int64_t launched_at_end = 0;       // by end_backward
  };
  const Stats& last_stats() const { return stats_; }  // of the latest last-microbatch backward

 private:
  void on_ready(std::size_t param);
  void mark_ready(std::size_t param);  // its gradient is final: staged (ZeRO-2), its bucket one closer
  void launch_ready(bool at_end);
  void launch(std::size_t bucket, bool at_end);
  // Post the bucket's collective, writing `output` (`grads` in place for the all-reduce): on
  // copies in the wire dtype (gradient_wire_dtype) when that is narrower, which complete() widens
  // back.
  void post_all_reduce(std::size_t bucket, const Tensor& grads);
  void post_reduce_scatter(std::size_t bucket, const Tensor& input, const Tensor& output);
  void complete(std::size_t bucket);  // waits for the bucket's collective and finishes it
  void complete_all();
  // ZeRO-2: the staging buffer of `bucket` (acquired from the pool on first use), and the copy of
  // param's elements in that bucket into it (its gradient is freed after its last part).
  Tensor& staging(std::size_t bucket);
  void stage_part(std::size_t param, std::size_t bucket);
  Tensor bucket_view(const Tensor& buffer, std::size_t bucket) const;
  Tensor chunk_view(const Tensor& shard, std::size_t bucket) const;

  comm::Group& group_;
  std::vector<Tensor> params_;
  ReplicaGradientOptions options_;
  int stage_ = 0;
  FlatLayout layout_;
  std::vector<Tensor> grad_buffers_;   // per layout buffer (ZeRO 0, 1)
  std::vector<Tensor> grad_shards_;    // per layout buffer (ZeRO 1, 2)
  std::vector<Tensor> param_buffers_;  // per layout buffer (ZeRO 1, 2)
  std::vector<Tensor> optimizer_params_;
  std::vector<Piece> pieces_;

  // The backward in progress.
  bool in_backward_ = false;
  bool overlapping_ = false;
  bool last_microbatch_ = false;
  bool reach_known_ = false;  // the parameters this backward never reaches are marked ready
  std::vector<char> ready_;              // per parameter
  std::vector<int> staged_parts_;        // ZeRO-2, per parameter: its parts copied to staging so far
  std::vector<int> pending_;             // per bucket: parameters not ready yet
  std::size_t next_bucket_ = 0;          // the next bucket to start
  std::size_t next_complete_ = 0;        // the next bucket to wait for
  std::vector<comm::Request> requests_;  // per bucket
  // Per bucket in flight: the tensor its collective writes (the buffer's view, or for a later
  // microbatch under ZeRO-2 a chunk to add to the shard).
  std::vector<Tensor> output_;
  std::vector<Tensor> wire_;  // per bucket in flight: what the collective writes (output_ unless narrowed)
  std::vector<char> written_;            // ZeRO-2: per bucket, the shard holds this step's sum so far
  std::vector<Tensor> staging_;          // ZeRO-2: per bucket, while in use
  std::vector<Tensor> staging_base_;     // ZeRO-2: per bucket, the pool buffer its staging view is of
  std::vector<std::int64_t> largest_bucket_;  // per layout buffer: the numel of its largest bucket
  std::vector<Tensor> pool_;             // ZeRO-2: free staging buffers
  std::int64_t staging_in_use_ = 0, staging_bytes_ = 0;  // staging_bytes_: the pool's whole size
  Stats stats_;
};

}  // namespace wf::train
