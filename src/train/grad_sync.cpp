#include "wallfacer/train/grad_sync.h"

#include "wallfacer/config/run_config.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/flat_layout.h"
#include "wallfacer/train/optimizer.h"

namespace wf::train {

std::vector<GradBucket> plan_gradient_buckets(const std::vector<Tensor>& params, std::int64_t bucket_bytes) {
  const FlatLayout layout(flat_layout_params(params), bucket_bytes, /*replicas=*/1);  // the Trainer's buckets, unpadded
  std::vector<GradBucket> buckets;
  for (const auto& b : layout.buckets()) {
    buckets.push_back({.params = b.params, .dtype = layout.buffers()[b.buffer].dtype, .numel = b.numel});
  }
  return buckets;
}

namespace {

// params[k]'s gradient as a flat view (shares its storage).
Tensor flat_grad(const Tensor& param) { return param.grad().view({param.numel()}); }

}  // namespace

Tensor pack_gradients(const GradBucket& bucket, const std::vector<Tensor>& params) {
  // On the gradients' device: copies and fills dispatch there, nothing is read on the host.
  const Device device = bucket.params.empty() ? Device::cpu() : params[bucket.params.front()].device();
  Tensor packed = Tensor::empty({bucket.numel}, bucket.dtype, device);
  std::int64_t at = 0;
  for (std::size_t k : bucket.params) {
    const Tensor& p = params[k];
    const Tensor g = p.grad();
    Tensor slot = packed.slice0(at, at + p.numel());
    if (g.defined()) {
      WF_CHECK(g.dtype() == p.dtype() && g.shape() == p.shape(),
               "gradient all-reduce: a gradient must have its parameter's dtype and shape ({} {}), got {} {}",
               dtype_name(p.dtype()), shape_str(p.shape()), dtype_name(g.dtype()), shape_str(g.shape()));
      slot.copy_(flat_grad(p));
    } else {
      slot.zero_();
    }
    at += p.numel();
  }
  return packed;
}

void unpack_gradients(const GradBucket& bucket, const Tensor& packed, const std::vector<Tensor>& params) {
  std::int64_t at = 0;
  for (std::size_t k : bucket.params) {
    Tensor p = params[k];
    if (!p.grad().defined()) p.set_grad(Tensor::empty(p.shape(), p.dtype(), p.device()));
    flat_grad(p).copy_(packed.slice0(at, at + p.numel()));
    at += p.numel();
  }
}

void all_reduce_gradients(comm::Group& group, const std::vector<Tensor>& params, std::int64_t bucket_bytes) {
  const std::vector<GradBucket> buckets = plan_gradient_buckets(params, bucket_bytes);
  if (group.size() == 1) return;
  for (const GradBucket& bucket : buckets) {
    Tensor packed = pack_gradients(bucket, params);
    // The non-blocking all-reduce, waited for at once: the Trainer (replica_gradients.h) posts the
    // same call, so both reduce in the same order. (The blocking all_reduce may pick another
    // algorithm, with another summation order, at 3+ ranks.)
    group.iall_reduce(packed).make_wait(Stream::current(packed.device()));
    unpack_gradients(bucket, packed, params);
  }
}

std::int64_t gradient_bucket_bytes(const config::RunConfig& config) {
  return static_cast<std::int64_t>(config.parallel.grad_bucket_mb * (1 << 20));
}

LossTotals sum_over(comm::Group& group, LossTotals local) {
  Tensor totals = Tensor::from_vector(std::vector<double>{local.sum, local.count}, {2});
  if (group.size() > 1) group.all_reduce(totals);
  return {totals.data<double>()[0], totals.data<double>()[1]};
}

double normalise_gradients(comm::Group& group, const std::vector<Tensor>& params, LossTotals local) {
  const LossTotals total = sum_over(group, local);
  const double normaliser = total.count > 0 ? 1.0 / total.count : 0.0;
  scale_gradients(params, normaliser);
  return total.sum * normaliser;
}

}  // namespace wf::train
