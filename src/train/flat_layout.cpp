// Flat buffers, buckets and ZeRO ownership (flat_layout.h).
#include "wallfacer/train/flat_layout.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wf::train {

FlatLayout::FlatLayout(const std::vector<Param>& params, std::int64_t bucket_bytes, int replicas,
                       bool split_parameters)
    : replicas_(replicas), slots_(params.size()) {
  WF_CHECK(bucket_bytes > 0, "gradient buckets: bucket_bytes must be positive, got {}", bucket_bytes);
  WF_CHECK(replicas >= 1, "FlatLayout: replicas must be at least 1, got {}", replicas);
  // The buffer of each dtype, in order of first appearance (from the last parameter).
  const auto buffer_of = [this](DType dtype) {
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].dtype == dtype) return i;
    }
    buffers_.push_back(Buffer{.dtype = dtype});
    return buffers_.size() - 1;
  };
  // Closes a bucket: padding to a multiple of replicas, then its chunk and place in the shard.
  const auto close = [this](Bucket& b) {
    Buffer& buffer = buffers_[b.buffer];
    b.numel = (b.numel + replicas_ - 1) / replicas_ * replicas_;
    b.chunk = b.numel / replicas_;
    b.shard_offset = buffer.shard_numel;
    buffer.numel += b.numel;
    buffer.shard_numel += b.chunk;
  };
  std::vector<std::size_t> open;  // per buffer: index of its open bucket + 1 (0: none)
  const auto open_bucket = [&](std::size_t buffer) -> Bucket& {
    if (open[buffer] == 0) {
      // A bucket starts where the buffer's closed buckets end.
      Bucket& b = buckets_.emplace_back();
      b.buffer = buffer;
      b.offset = buffers_[buffer].numel;
      open[buffer] = buckets_.size();
    }
    return buckets_[open[buffer] - 1];
  };
  // Parameters in reverse order, the isolated ones after all others (see flat_layout.h).
  std::vector<std::size_t> order;
  for (const bool isolated : {false, true}) {
    for (std::size_t k = params.size(); k-- > 0;) {
      if (params[k].isolated == isolated) order.push_back(k);
    }
  }
  const auto close_open = [&](std::size_t buffer) {
    if (open[buffer] != 0) {
      close(open_bucket(buffer));
      open[buffer] = 0;
    }
  };
  for (const std::size_t k : order) {
    const Param& p = params[k];
    WF_CHECK(p.numel > 0, "FlatLayout: parameter {} has no elements", k);
    const std::size_t buffer = buffer_of(p.dtype);
    open.resize(buffers_.size(), 0);
    const auto element = static_cast<std::int64_t>(dtype_size(p.dtype));
    Slot& slot = slots_[k];
    slot.buffer = buffer;
    slot.numel = p.numel;
    if (p.isolated) close_open(buffer);
    if (split_parameters) {
      // Fixed-size buckets, a multiple of replicas so that only a buffer's last one is padded.
      const std::int64_t cap = std::max<std::int64_t>(1, bucket_bytes / element / replicas_) * replicas_;
      slot.offset = open[buffer] ? open_bucket(buffer).offset + open_bucket(buffer).numel : buffers_[buffer].numel;
      for (std::int64_t left = p.numel; left > 0;) {
        Bucket& b = open_bucket(buffer);
        const std::int64_t take = std::min(left, cap - b.numel);
        b.params.push_back(k);
        b.numel += take;
        left -= take;
        slot.buckets.push_back(open[buffer] - 1);
        if (b.numel == cap) {
          close(b);
          open[buffer] = 0;
        }
      }
      if (p.isolated) close_open(buffer);
      continue;
    }
    if (open[buffer] != 0 && (open_bucket(buffer).numel + p.numel) * element > bucket_bytes) close_open(buffer);
    Bucket& b = open_bucket(buffer);
    slot.buckets = {open[buffer] - 1};
    slot.offset = b.offset + b.numel;
    b.params.push_back(k);
    b.numel += p.numel;
    if (p.isolated) close_open(buffer);
  }
  for (const std::size_t b : open) {
    if (b != 0) close(buckets_[b - 1]);
  }
}

std::pair<std::int64_t, std::int64_t> FlatLayout::part_in(std::size_t param, std::size_t bucket) const {
  const Slot& s = slots_.at(param);
  const Bucket& b = buckets_.at(bucket);
  const std::int64_t begin = std::clamp(b.offset, s.offset, s.offset + s.numel);
  const std::int64_t end = std::clamp(b.offset + b.numel, s.offset, s.offset + s.numel);
  return {begin - s.offset, end - s.offset};
}

std::vector<FlatLayout::Owned> FlatLayout::owned(std::size_t param, int replica) const {
  WF_CHECK(param < slots_.size() && replica >= 0 && replica < replicas_,
           "FlatLayout::owned: parameter {} of {}, replica {} of {}", param, slots_.size(), replica, replicas_);
  const Slot& s = slots_[param];
  std::vector<Owned> out;
  for (const std::size_t bucket : s.buckets) {
    const Bucket& b = buckets_[bucket];
    const std::int64_t lo = b.offset + replica * b.chunk, hi = lo + b.chunk;
    const std::int64_t begin = std::clamp(lo, s.offset, s.offset + s.numel);
    const std::int64_t end = std::clamp(hi, s.offset, s.offset + s.numel);
    if (begin < end) {
      out.push_back({.begin = begin - s.offset, .end = end - s.offset, .shard_offset = b.shard_offset + (begin - lo)});
    }
  }
  return out;
}

std::vector<FlatLayout::Param> flat_layout_params(const std::vector<Tensor>& params) {
  std::vector<FlatLayout::Param> out;
  out.reserve(params.size());
  for (const Tensor& p : params) out.push_back({p.numel(), p.dtype()});
  return out;
}

FlatLayout replica_layout(const std::vector<Tensor>& params, std::int64_t bucket_bytes, int replicas, int zero,
                          const std::vector<std::size_t>& isolated) {
  std::vector<FlatLayout::Param> flat = flat_layout_params(params);
  for (const std::size_t k : isolated) {
    WF_CHECK(k < flat.size(), "replica_layout: isolated parameter {} of {}", k, flat.size());
    flat[k].isolated = true;
  }
  return FlatLayout(flat, bucket_bytes, zero > 0 ? replicas : 1, /*split_parameters=*/zero == 2);
}

}  // namespace wf::train
