#include "wallfacer/autograd/node.h"

#include <atomic>
#include <mutex>

#include "kernels/backend.h"
#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/core/stream.h"

namespace wf::autograd {
namespace {
std::atomic<std::uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  set_outputs({OutputMeta{leaf_->shape, leaf_->dtype, leaf_->storage->device()}});
}

namespace {

// True when nothing but `t` can reach its memory: its handle is the only one on its TensorImpl,
// that impl the only one on its storage, and the storage holds exactly t's elements.
bool sole_owner_of_whole_storage(const Tensor& t) {
  const auto& impl = t.impl_ptr();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && impl->offset == 0 &&
         impl->storage->nbytes() == static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
}

}  // namespace

TensorList AccumulateGrad::apply(TensorList grad_outputs) {
  Tensor& grad = leaf_->autograd_meta().grad;
  Tensor incoming = std::move(grad_outputs.at(0));
  grad_outputs.clear();
  WF_CHECK(incoming.shape() == leaf_->shape, "gradient of shape {} for a leaf of shape {}",
           shape_str(incoming.shape()), shape_str(leaf_->shape));
  if (!grad.defined()) {
    // The incoming buffer may alias other gradients (an add's backward hands one tensor to both
    // inputs): the leaf adopts it only when nothing else can reach it, else keeps a private copy.
    // Adopting saves copying every weight's gradient every step (500 MB for GPT-2 124M).
    if (incoming.dtype() == leaf_->dtype && sole_owner_of_whole_storage(incoming)) {
      grad = std::move(incoming);
    } else {
      grad = Tensor::empty(leaf_->shape, leaf_->dtype, leaf_->storage->device());
      grad.copy_(incoming);
    }
  } else {
    accumulate_into(grad, incoming);
  }
  run_grad_accumulated_hook(leaf_);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  // Forwards on several threads may share parameters: finding or creating the one sink is
  // serialised (uncontended in the common single-threaded forward).
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::weak_ptr<Node>& cached = t.impl_ptr()->autograd_meta().grad_accumulator;
  std::shared_ptr<Node> sink = cached.lock();
  if (!sink) {
    sink = std::make_shared<AccumulateGrad>(t.impl_ptr());
    cached = sink;
  }
  return {std::move(sink), 0};
}

void accumulate_into(Tensor& dst, const Tensor& src) {
  WF_CHECK(dst.shape() == src.shape(), "accumulate_into: shapes {} and {} differ", shape_str(dst.shape()),
           shape_str(src.shape()));
  if (dst.dtype() != DType::f32 && dst.dtype() != DType::f64) {
    // 16-bit storage: add in f32, round once on store.
    Tensor wide = dst.to(DType::f32);
    accumulate_into(wide, src);
    dst.copy_(wide);
    return;
  }
  const Device device = dst.device();
  WF_CHECK(src.device() == device, "accumulate_into: a gradient on {} cannot add into one on {}; a tensor's "
           "gradients live on its device: move the tensor that produced it with .to(Device::parse(\"{}\"))",
           src.device().str(), device.str(), device.str());
  const Tensor s = src.to(dst.dtype());
  // dst += 1·s in the kernels of dst's device: bitwise dst + s (autograd sits below ops, so it asks
  // the backend itself rather than through ops::kernels_for).
  kernels::backend_for(device).add_scaled(Stream::current(device), dst.dtype(), dst.numel(), 1.0, s.raw_data(),
                                          dst.raw_data());
}

}  // namespace wf::autograd
