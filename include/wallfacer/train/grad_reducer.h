#pragma once
// GradReducer: the gradient all-reduce of replicated weights (grad_sync.h) overlapped with the
// backward of the last microbatch, after PyTorch DDP's Reducer.
//
//   reducer.prepare(last) before each microbatch's backward; reducer.finish() after the last.
//
// Each parameter gets a "gradient accumulated" hook (autograd/grad_hooks.h). During the last
// microbatch's backward a parameter's gradient is final once its hook has fired as many times
// as in an earlier backward (the count is learned, not assumed: a tied weight fires once per
// use, and under activation checkpointing a weight fires from each nested backward that
// recomputes it). A bucket (plan_gradient_buckets: reverse parameter order) whose parameters are
// all final is packed and its all-reduce started (Group::iall_reduce); buckets start strictly
// in order, so every rank posts the same collectives in the same order whatever the timing.
// finish() starts what the backward did not (everything when no count is known yet: the first
// backward of an accumulation-1 run; and any bucket holding a parameter the learned backward
// never reached), waits for all buckets in order and copies the sums back.
//
// Same buckets, same packing, same MPI calls as all_reduce_gradients: the gradients agree bit
// for bit and the traffic is the same. If the last backward accumulates a gradient more often
// than the one it learned from (the graph changed between backwards) after its bucket started,
// the reduced value would miss that part: finish() throws wf::Error saying so instead.
//
// One reducer per set of parameters: hooks are per leaf, so a second reducer over the same
// tensors would replace the first one's. Not thread-safe; hooks run on the backward's thread.
#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/comm/group.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/train/grad_sync.h"

namespace wf::train {

class GradReducer {
 public:
  // `group`: the replicas (dp × sp), more than one rank. `params` as the model lists them.
  GradReducer(comm::Group& group, std::vector<Tensor> params, std::int64_t bucket_bytes = kDefaultBucketBytes);
  ~GradReducer();  // removes the hooks, completes what is still in flight
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before each microbatch's backward. The previous backward (if prepare was called for it)
  // taught the hook counts; with `last_microbatch` this backward starts the all-reduces.
  void prepare(bool last_microbatch);
  // After the last microbatch's backward: every parameter's grad then holds the sum over the group.
  void finish();

  struct Stats {
    std::int64_t buckets = 0;
    std::int64_t launched_in_backward = 0;  // started by a hook during the backward
    std::int64_t launched_at_finish = 0;
  };
  const Stats& last_stats() const { return stats_; }  // of the latest finish()
  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  void on_accumulated(std::size_t param);
  // Starts buckets in order while the next one has all its gradients final.
  void launch_ready(bool at_finish);
  void launch(std::size_t bucket, bool at_finish);
  void learn_counts();
  void wait_all();

  comm::Group& group_;
  std::vector<Tensor> params_;
  std::vector<GradBucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter → bucket
  std::vector<int> fires_;              // hook calls per parameter in the current backward
  std::vector<int> expected_;           // hook calls per parameter in the backward learned from
  bool counts_known_ = false;
  bool counting_ = false;                // a backward prepared and not yet learned from
  bool overlapping_ = false;             // this backward starts the all-reduces
  std::vector<int> not_final_;           // per bucket: parameters still expecting fires
  std::size_t next_bucket_ = 0;          // the next bucket to start
  std::vector<Tensor> packed_;           // per bucket, while in flight
  std::vector<comm::Request> requests_;  // per bucket
  std::vector<std::size_t> late_;        // parameters that fired after their bucket started
  Stats stats_;
};

}  // namespace wf::train
