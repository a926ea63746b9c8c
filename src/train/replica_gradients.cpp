// Flat gradient buffers, their overlapped reduction and ZeRO sharding (replica_gradients.h).
#include "wallfacer/train/replica_gradients.h"

#include <algorithm>
#include <utility>

#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/autograd/node.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::train {
namespace {

// Moves `param`'s values into `view` and makes the parameter a view of it: every holder of the
// parameter (modules, the optimizer) shares its TensorImpl, so they all see the new storage, as
// with PyTorch's `param.data = buffer_view` in Megatron's distributed optimizer.
void move_into(Tensor& param, const Tensor& view) {
  Tensor target = view;
  target.copy_(param.view({param.numel()}));
  TensorImpl& impl = *param.impl();
  impl.storage = view.impl()->storage;
  impl.offset = view.impl()->offset;
}

// Where the parameters are (train.device): the buffers go there too.
Device device_of(const std::vector<Tensor>& params) { return params.empty() ? Device::cpu() : params.front().device(); }

std::int64_t bytes_of(const std::vector<Tensor>& tensors) {
  std::int64_t total = 0;
  for (const Tensor& t : tensors) total += t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0;
  return total;
}

}  // namespace

ReplicaGradients::ReplicaGradients(comm::Group& replicas, std::vector<Tensor> params, ReplicaGradientOptions options)
    : group_(replicas), params_(std::move(params)), options_(options) {
  WF_CHECK(options_.zero >= 0 && options_.zero <= 2, "ZeRO stage {} does not exist; use 0, 1 or 2", options_.zero);
  WF_CHECK(options_.reduce_dtype == DType::f32 || options_.reduce_dtype == DType::bf16,
           "ReplicaGradients: gradients are reduced in f32 or bf16, not {}", dtype_name(options_.reduce_dtype));
  WF_CHECK(options_.staging_buffers >= 1, "ReplicaGradients: staging_buffers must be at least 1, got {}",
           options_.staging_buffers);
  const Device device = device_of(params_);
  for (const Tensor& p : params_) {
    WF_CHECK(p.device() == device, "ReplicaGradients: parameter of shape {} is on {}, but the first is on {}; move the "
             "model to one device (train.device)", shape_str(p.shape()), p.device().str(), device.str());
  }
  stage_ = effective_zero_stage(group_.size(), options_.zero);
  layout_ = replica_layout(params_, options_.bucket_bytes, group_.size(), stage_, options_.isolated);
  const auto& buffers = layout_.buffers();
  const auto& slots = layout_.slots();
  autograd::NoGradGuard no_grad;
  if (stage_ < 2) {
    for (const auto& b : buffers) grad_buffers_.push_back(Tensor::zeros({b.numel}, b.dtype, device));
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto& s = slots[k];
      params_[k].set_grad(grad_buffers_[s.buffer].slice0(s.offset, s.offset + s.numel).view(params_[k].shape()));
    }
  }
  if (stage_ == 0) {
    optimizer_params_ = params_;
    for (std::size_t k = 0; k < params_.size(); ++k) pieces_.push_back({k, 0, params_[k].numel()});
  } else {
    for (const auto& b : buffers) {
      grad_shards_.push_back(Tensor::zeros({b.shard_numel}, b.dtype, device));
      param_buffers_.push_back(Tensor::zeros({b.numel}, b.dtype, device));
    }
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto& s = slots[k];
      move_into(params_[k], param_buffers_[s.buffer].slice0(s.offset, s.offset + s.numel));
      for (const FlatLayout::Owned& o : layout_.owned(k, group_.rank())) {
        Tensor piece = param_buffers_[s.buffer].slice0(s.offset + o.begin, s.offset + o.end);
        piece.set_grad(grad_shards_[s.buffer].slice0(o.shard_offset, o.shard_offset + (o.end - o.begin)));
        optimizer_params_.push_back(piece);
        pieces_.push_back({k, o.begin, o.end});
      }
    }
  }
  const std::size_t n_buckets = layout_.buckets().size();
  ready_.assign(params_.size(), 0);
  staged_parts_.assign(params_.size(), 0);
  pending_.assign(n_buckets, 0);
  requests_.resize(n_buckets);
  output_.resize(n_buckets);
  wire_.resize(n_buckets);
  staging_.resize(n_buckets);
  staging_base_.resize(n_buckets);
  largest_bucket_.assign(buffers.size(), 0);
  for (const auto& b : layout_.buckets()) largest_bucket_[b.buffer] = std::max(largest_bucket_[b.buffer], b.numel);
  written_.assign(n_buckets, 0);
  if (options_.overlap && group_.size() > 1) {
    for (std::size_t k = 0; k < params_.size(); ++k) {
      autograd::set_grad_ready_hook(params_[k], [this, k](const Tensor&) { on_ready(k); });
    }
  }
}

ReplicaGradients::~ReplicaGradients() {
  for (const Tensor& p : params_) autograd::clear_grad_ready_hook(p);
  try {
    for (comm::Request& r : requests_) std::exchange(r, {}).wait();
  } catch (const std::exception& e) {
    log::error("gradients of group '{}': a collective still in flight failed: {}", group_.name(), e.what());
  }
}

Tensor ReplicaGradients::bucket_view(const Tensor& buffer, std::size_t bucket) const {
  const auto& b = layout_.buckets()[bucket];
  return buffer.slice0(b.offset, b.offset + b.numel);
}

Tensor ReplicaGradients::chunk_view(const Tensor& shard, std::size_t bucket) const {
  const auto& b = layout_.buckets()[bucket];
  return shard.slice0(b.shard_offset, b.shard_offset + b.chunk);
}

void ReplicaGradients::begin_backward(bool last_microbatch) {
  WF_CHECK(!in_backward_, "ReplicaGradients::begin_backward twice without end_backward");
  in_backward_ = true;
  last_microbatch_ = last_microbatch;
  // ZeRO-2 reduces every microbatch's gradients (they do not persist); 0 and 1 the sum of all.
  const bool reduces = group_.size() > 1 && (stage_ == 2 || last_microbatch);
  overlapping_ = reduces && options_.overlap;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(staged_parts_.begin(), staged_parts_.end(), 0);
  reach_known_ = false;
  next_bucket_ = next_complete_ = 0;
  for (std::size_t b = 0; b < pending_.size(); ++b) {
    pending_[b] = static_cast<int>(layout_.buckets()[b].params.size());
  }
  if (last_microbatch) stats_ = Stats{.buckets = static_cast<std::int64_t>(pending_.size())};
}

void ReplicaGradients::on_ready(std::size_t param) {
  // A backward outside begin/end is not ours to reduce; one that reduces nothing (an earlier
  // microbatch at ZeRO 0 and 1) leaves everything to the last.
  if (!in_backward_ || !overlapping_ || ready_[param]) return;
  if (!reach_known_) {
    // The first hook of this backward: a parameter it will never reach (a layer skipped, a
    // branch not taken) already holds its final gradient, so it does not hold its bucket back.
    reach_known_ = true;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (k != param && !autograd::outermost_backward_reaches(params_[k])) mark_ready(k);
    }
  }
  mark_ready(param);
}

void ReplicaGradients::mark_ready(std::size_t param) {
  if (ready_[param]) return;
  ready_[param] = 1;
  // Bucket by bucket, each started as soon as it is complete: under ZeRO-2 a parameter that
  // spans many buckets then needs no more staging buffers at once than the pool allows.
  for (const std::size_t bucket : layout_.slots()[param].buckets) {
    if (stage_ == 2) stage_part(param, bucket);
    --pending_[bucket];
    launch_ready(false);
  }
}

void ReplicaGradients::launch_ready(bool at_end) {
  // next_bucket_ moves past a bucket only once its collective is posted: a staging buffer
  // acquired while launching it (ZeRO-2, at the pool's cap) may wait for the buckets before it,
  // never for itself.
  while (next_bucket_ < pending_.size() && (at_end || pending_[next_bucket_] == 0)) {
    launch(next_bucket_, at_end);
    ++next_bucket_;
  }
}

Tensor& ReplicaGradients::staging(std::size_t bucket) {
  Tensor& mine = staging_[bucket];
  if (mine.defined()) return mine;
  // At the cap, the oldest collective in flight finishes first and frees its buffer.
  while (staging_in_use_ >= options_.staging_buffers && next_complete_ < next_bucket_) complete(next_complete_++);
  const auto& b = layout_.buckets()[bucket];
  const DType dtype = layout_.buffers()[b.buffer].dtype;
  // Every buffer of a dtype has that dtype's largest bucket's size, so any free one serves any
  // bucket and the pool never holds more than the buffers in use at its busiest.
  const auto free = std::find_if(pool_.begin(), pool_.end(), [&](const Tensor& t) { return t.dtype() == dtype; });
  Tensor base;
  if (free != pool_.end()) {
    base = *free;
    pool_.erase(free);
  } else {
    base = Tensor::empty({largest_bucket_[b.buffer]}, dtype, device_of(params_));
    staging_bytes_ += static_cast<std::int64_t>(base.nbytes());
  }
  ++staging_in_use_;
  staging_base_[bucket] = base;
  mine = base.slice0(0, b.numel);
  mine.zero_();  // padding, and parameters no gradient reached, take part as zeros
  return mine;
}

void ReplicaGradients::stage_part(std::size_t param, std::size_t bucket) {
  Tensor p = params_[param];
  const Tensor g = p.grad();
  if (!g.defined()) return;
  const auto& s = layout_.slots()[param];
  const auto& b = layout_.buckets()[bucket];
  const auto [begin, end] = layout_.part_in(param, bucket);
  const std::int64_t at = s.offset + begin - b.offset;
  Tensor slot = staging(bucket).slice0(at, at + (end - begin));
  slot.copy_(g.view({s.numel}).slice0(begin, end));
  // The full-size gradient does not outlive the copy of its last part.
  if (++staged_parts_[param] == static_cast<int>(s.buckets.size())) p.set_grad(Tensor());
}

void ReplicaGradients::launch(std::size_t bucket, bool at_end) {
  const auto& b = layout_.buckets()[bucket];
  switch (stage_) {
    case 0: post_all_reduce(bucket, bucket_view(grad_buffers_[b.buffer], bucket)); break;
    case 1:
      post_reduce_scatter(bucket, bucket_view(grad_buffers_[b.buffer], bucket), chunk_view(grad_shards_[b.buffer], bucket));
      break;
    default: {
      for (std::size_t k : b.params) {
        if (!ready_[k]) stage_part(k, bucket);  // no hook staged it: overlap off, or no gradient reached it
      }
      const Tensor& input = staging(bucket);
      // The first reduction of the step writes the shard; later microbatches' are added to it.
      post_reduce_scatter(bucket, input,
                          written_[bucket] ? Tensor::empty({b.chunk}, input.dtype(), input.device())
                                           : chunk_view(grad_shards_[b.buffer], bucket));
    }
  }
  if (last_microbatch_) ++(at_end ? stats_.launched_at_end : stats_.launched_in_backward);
}

void ReplicaGradients::post_all_reduce(std::size_t bucket, const Tensor& grads) {
  output_[bucket] = grads;
  wire_[bucket] = grads.to(gradient_wire_dtype(grads.dtype(), options_.reduce_dtype));  // grads itself unless narrowed
  requests_[bucket] = group_.iall_reduce(wire_[bucket]);
}

void ReplicaGradients::post_reduce_scatter(std::size_t bucket, const Tensor& input, const Tensor& output) {
  const DType wire = gradient_wire_dtype(input.dtype(), options_.reduce_dtype);
  output_[bucket] = output;
  wire_[bucket] = wire == output.dtype() ? output : Tensor::empty(output.shape(), wire, output.device());
  requests_[bucket] = group_.ireduce_scatter(input.to(wire), wire_[bucket]);
}

void ReplicaGradients::complete(std::size_t bucket) {
  Tensor received = std::exchange(output_[bucket], {});
  // The current stream waits for the reduction; on a device's own transport the host does not.
  std::exchange(requests_[bucket], {}).make_wait(Stream::current(received.device()));
  const Tensor wire = std::exchange(wire_[bucket], {});
  if (!wire.is_same(received)) received.copy_(wire);  // widened back from the narrower wire dtype
  if (stage_ != 2) return;
  Tensor shard = chunk_view(grad_shards_[layout_.buckets()[bucket].buffer], bucket);
  if (written_[bucket]) autograd::accumulate_into(shard, received);  // a later microbatch's
  written_[bucket] = 1;
  staging_[bucket] = Tensor();
  pool_.push_back(std::exchange(staging_base_[bucket], {}));  // the whole buffer, not the bucket's view of it
  --staging_in_use_;
}

void ReplicaGradients::complete_all() {
  while (next_complete_ < next_bucket_) complete(next_complete_++);
}

void ReplicaGradients::end_backward() {
  WF_CHECK(in_backward_, "ReplicaGradients::end_backward without begin_backward");
  const bool reduces = group_.size() > 1 && (stage_ == 2 || last_microbatch_);
  if (reduces) {
    launch_ready(/*at_end=*/true);
    complete_all();
  }
  in_backward_ = false;
  overlapping_ = false;
}

void ReplicaGradients::gather_parameters() {
  if (stage_ == 0) return;
  autograd::NoGradGuard no_grad;
  const auto& buckets = layout_.buckets();
  std::vector<Tensor> mine(buckets.size()), wholes(buckets.size());
  std::vector<comm::Request> gathers(buckets.size());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    wholes[i] = bucket_view(param_buffers_[b.buffer], i);
    // In place: the input is this replica's own chunk of the output.
    mine[i] = wholes[i].slice0(group_.rank() * b.chunk, (group_.rank() + 1) * b.chunk);
    gathers[i] = group_.iall_gather(mine[i], wholes[i]);
  }
  for (std::size_t i = 0; i < gathers.size(); ++i) gathers[i].make_wait(Stream::current(wholes[i].device()));
}

void ReplicaGradients::zero_grad() {
  for (Tensor& buffer : grad_buffers_) buffer.zero_();
  // ZeRO-2's shard needs no zeroing: every bucket is reduced in every microbatch, the first
  // reduction of a step writes it and the later ones add to it.
  std::fill(written_.begin(), written_.end(), 0);
}

std::int64_t ReplicaGradients::gradient_bytes() const { return persistent_gradient_bytes() + staging_bytes_; }

std::int64_t ReplicaGradients::persistent_gradient_bytes() const {
  return bytes_of(grad_buffers_) + bytes_of(grad_shards_);
}

}  // namespace wf::train
