#include "wallfacer/train/loss_totals.h"

#include "kernels/backend.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/shape_ops.h"

namespace wf::train {

DeviceLossTotals::DeviceLossTotals(Device device) : totals_(Tensor::zeros({2}, DType::f64, device)) {}

void DeviceLossTotals::add(const Tensor& loss_sum, const Tensor& count) {
  WF_CHECK(loss_sum.defined() && loss_sum.numel() == 1 && count.defined() && count.numel() == 1,
           "DeviceLossTotals::add: a loss sum and a count of one element each are required, got shapes {} and {}",
           loss_sum.defined() ? shape_str(loss_sum.shape()) : "undefined",
           count.defined() ? shape_str(count.shape()) : "undefined");
  autograd::NoGradGuard no_grad;
  // Widened to f64 on the device as item() widened it on the host, then added as the host added.
  const Tensor pair = cat({reshape(loss_sum.detach().to(DType::f64), {1}), reshape(count.to(DType::f64), {1})}, 0);
  totals_ = wf::add(totals_, pair);
}

void DeviceLossTotals::add(const Tensor& loss_sum, std::int64_t count) {
  add(loss_sum, Tensor::full({}, static_cast<double>(count), DType::f64, totals_.device()));
}

DeviceLossTotals DeviceLossTotals::sum_over(comm::Group& group) const {
  DeviceLossTotals total(*this);
  if (group.size() > 1) {
    total.totals_ = totals_.clone();  // the all-reduce is in place; this one stays as it was
    group.all_reduce(total.totals_);
  }
  return total;
}

LossTotals DeviceLossTotals::read() const {
  const Tensor host = totals_.to(Device::cpu());
  if (totals_.device().is_cpu()) detail::count_host_sync();  // what a device would cost: counted alike
  return {host.data<double>()[0], host.data<double>()[1]};
}

Tensor normalise_gradients_on_device(comm::Group& group, const std::vector<Tensor>& params,
                                     const DeviceLossTotals& local) {
  const DeviceLossTotals total = local.sum_over(group);
  const Tensor& totals = total.totals();
  const Stream stream = Stream::current(totals.device());
  kernels::Backend& k = kernels::backend_for(totals.device());
  Tensor out = Tensor::empty({2}, DType::f64, totals.device());  // [1 / count, mean loss]
  k.loss_normaliser(stream, totals.data<double>(), out.data<double>());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    WF_CHECK(g.device() == totals.device(),
             "normalise_gradients: a gradient on {} but the loss totals on {}; the parameters and the batches must "
             "be on one device (train.device)",
             g.device().str(), totals.device().str());
    k.scale_inplace_by(stream, g.dtype(), g.numel(), g.raw_data(), out.data<double>());
  }
  return out.slice0(1, 2);
}

}  // namespace wf::train
