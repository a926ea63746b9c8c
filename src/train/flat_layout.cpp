// Flat buffers, buckets and ZeRO ownership (flat_layout.h).
#include "wallfacer/train/flat_layout.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wf::train {

FlatLayout::FlatLayout(const std::vector<Param>& params, std::int64_t bucket_bytes, int replicas)
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
  // Closes the open bucket of buffer i: padding to a multiple of replicas, then its chunk.
  const auto close = [this](Bucket& b) {
    Buffer& buffer = buffers_[b.buffer];
    const std::int64_t used = b.numel;
    b.numel = (used + replicas_ - 1) / replicas_ * replicas_;
    b.chunk = b.numel / replicas_;
    b.shard_offset = buffer.shard_numel;
    buffer.numel += b.numel;
    buffer.shard_numel += b.chunk;
  };
  std::vector<std::int64_t> open(0);  // per buffer: index of its open bucket + 1 (0: none)
  for (std::size_t k = params.size(); k-- > 0;) {
    const Param& p = params[k];
    WF_CHECK(p.numel > 0, "FlatLayout: parameter {} has no elements", k);
    const std::size_t buffer = buffer_of(p.dtype);
    open.resize(buffers_.size(), 0);
    const auto bytes = p.numel * static_cast<std::int64_t>(dtype_size(p.dtype));
    const auto bucket_bytes_used = [&](const Bucket& b) { return b.numel * static_cast<std::int64_t>(dtype_size(p.dtype)); };
    if (open[buffer] == 0 || bucket_bytes_used(buckets_[open[buffer] - 1]) + bytes > bucket_bytes) {
      if (open[buffer] != 0) close(buckets_[open[buffer] - 1]);
      // A bucket starts where the buffer's closed buckets end.
      buckets_.push_back(Bucket{.buffer = buffer, .offset = buffers_[buffer].numel});
      open[buffer] = static_cast<std::int64_t>(buckets_.size());
    }
    Bucket& b = buckets_[open[buffer] - 1];
    slots_[k] = Slot{.buffer = buffer, .bucket = static_cast<std::size_t>(open[buffer] - 1),
                     .offset = b.offset + b.numel, .numel = p.numel};
    b.params.push_back(k);
    b.numel += p.numel;
  }
  for (const std::int64_t b : open) {
    if (b != 0) close(buckets_[b - 1]);
  }
}

FlatLayout::Owned FlatLayout::owned(std::size_t param, int replica) const {
  WF_CHECK(param < slots_.size() && replica >= 0 && replica < replicas_,
           "FlatLayout::owned: parameter {} of {}, replica {} of {}", param, slots_.size(), replica, replicas_);
  const Slot& s = slots_[param];
  const Bucket& b = buckets_[s.bucket];
  const std::int64_t lo = b.offset + replica * b.chunk, hi = lo + b.chunk;
  const std::int64_t begin = std::clamp(lo, s.offset, s.offset + s.numel);
  const std::int64_t end = std::clamp(hi, s.offset, s.offset + s.numel);
  return Owned{.begin = begin - s.offset, .end = end - s.offset, .shard_offset = b.shard_offset + (begin - lo)};
}

std::vector<FlatLayout::Param> flat_layout_params(const std::vector<Tensor>& params) {
  std::vector<FlatLayout::Param> out;
  out.reserve(params.size());
  for (const Tensor& p : params) out.push_back({p.numel(), p.dtype()});
  return out;
}

}  // namespace wf::train
