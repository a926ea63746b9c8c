#include "wallfacer/train/grad_reducer.h"

#include <algorithm>

#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::train {

GradReducer::GradReducer(comm::Group& group, std::vector<Tensor> params, std::int64_t bucket_bytes)
    : group_(group), params_(std::move(params)), buckets_(plan_gradient_buckets(params_, bucket_bytes)) {
  WF_CHECK(group_.size() > 1,
           "GradReducer over group '{}' of one rank: there is nothing to reduce; skip the reducer (the trainer does)",
           group_.name());
  bucket_of_.resize(params_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (std::size_t k : buckets_[b].params) bucket_of_[k] = b;
  }
  fires_.assign(params_.size(), 0);
  expected_.assign(params_.size(), 0);
  not_final_.assign(buckets_.size(), 0);
  packed_.resize(buckets_.size());
  requests_.resize(buckets_.size());
  for (std::size_t k = 0; k < params_.size(); ++k) {
    autograd::set_grad_accumulated_hook(params_[k], [this, k](const Tensor&) { on_accumulated(k); });
  }
}

GradReducer::~GradReducer() {
  for (const Tensor& p : params_) autograd::clear_grad_accumulated_hook(p);
  try {
    wait_all();
  } catch (const std::exception& e) {
    log::error("GradReducer on group '{}': an all-reduce still in flight failed: {}", group_.name(), e.what());
  }
}

void GradReducer::learn_counts() {
  expected_ = fires_;
  counts_known_ = true;
  counting_ = false;
}

void GradReducer::prepare(bool last_microbatch) {
  if (counting_) learn_counts();  // the previous microbatch's backward is complete
  wait_all();                     // left over only when an earlier step threw before finish()
  std::fill(fires_.begin(), fires_.end(), 0);
  late_.clear();
  counting_ = true;
  overlapping_ = last_microbatch && counts_known_;
  next_bucket_ = 0;
  if (!last_microbatch) return;
  stats_ = Stats{.buckets = static_cast<std::int64_t>(buckets_.size())};
  if (!overlapping_) return;
  // A parameter the learned backward never reached (expected 0) is never final before finish():
  // if that was a hook lost to a replaced tensor, starting its bucket early would be wrong.
  for (std::size_t b = 0; b < buckets_.size(); ++b) not_final_[b] = static_cast<int>(buckets_[b].params.size());
}

void GradReducer::on_accumulated(std::size_t param) {
  if (!counting_) return;  // a backward outside prepare() / finish(): not ours to reduce
  const int fired = ++fires_[param];
  if (!overlapping_) return;
  const std::size_t bucket = bucket_of_[param];
  if (fired == expected_[param]) {
    --not_final_[bucket];
    launch_ready(false);
  } else if (fired > expected_[param] && bucket < next_bucket_) {
    late_.push_back(param);  // its bucket was packed without this part
  }
}

void GradReducer::launch(std::size_t bucket, bool at_finish) {
  packed_[bucket] = pack_gradients(buckets_[bucket], params_);
  requests_[bucket] = group_.iall_reduce(packed_[bucket]);
  ++(at_finish ? stats_.launched_at_finish : stats_.launched_in_backward);
}

void GradReducer::launch_ready(bool at_finish) {
  while (next_bucket_ < buckets_.size() && (at_finish || not_final_[next_bucket_] == 0)) {
    launch(next_bucket_++, at_finish);
  }
}

void GradReducer::wait_all() {
  for (comm::Request& request : requests_) {
    comm::Request done = std::exchange(request, {});
    done.wait();
  }
}

void GradReducer::finish() {
  WF_CHECK(counting_, "GradReducer::finish without prepare(true) before the backward");
  launch_ready(/*at_finish=*/true);
  wait_all();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    unpack_gradients(buckets_[b], packed_[b], params_);
    packed_[b] = Tensor();
  }
  const std::vector<int> learned_from = expected_;
  const bool was_overlapping = overlapping_;
  learn_counts();
  overlapping_ = false;
  if (was_overlapping && !late_.empty()) {
    const std::size_t k = late_.front();
    WF_FAIL("gradient all-reduce overlapped with the backward: parameter {} (shape {}) received {} gradient "
            "accumulations in this backward, more than the {} of the backward its bucket's start was timed by, so "
            "its all-reduce started before its gradient was complete ({} parameter(s) affected); the autograd graph "
            "changed between backwards. Train with the synchronous all-reduce (Trainer::set_grad_overlap(false)) "
            "for a model whose graph varies",
            k, shape_str(params_[k].shape()), fires_[k], learned_from[k], late_.size());
  }
}

}  // namespace wf::train
