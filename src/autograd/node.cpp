#include "wallfacer/autograd/node.h"

#include <atomic>

#include "wallfacer/autograd/grad_hooks.h"

namespace wf::autograd {
namespace {
std::atomic<std::uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  set_outputs({OutputMeta{leaf_->shape, leaf_->dtype, leaf_->storage->device()}});
}

TensorList AccumulateGrad::apply(TensorList grad_outputs) {
  Tensor& grad = leaf_->autograd_meta().grad;
  const Tensor& incoming = grad_outputs.at(0);
  WF_CHECK(incoming.shape() == leaf_->shape, "gradient of shape {} for a leaf of shape {}",
           shape_str(incoming.shape()), shape_str(leaf_->shape));
  if (!grad.defined()) {
    // A private copy in the leaf's dtype: the incoming buffer may alias other gradients.
    grad = Tensor::empty(leaf_->shape, leaf_->dtype, leaf_->storage->device());
    grad.copy_(incoming);
  } else {
    accumulate_into(grad, incoming);
  }
  run_grad_accumulated_hook(leaf_);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {std::make_shared<AccumulateGrad>(t.impl_ptr()), 0};
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
  const Tensor s = src.to(dst.dtype());
  const std::int64_t n = dst.numel();
  dispatch_float(dst.dtype(), "gradient accumulation", [&](auto tag) {
    using T = decltype(tag);
    T* d = dst.data<T>();
    const T* a = s.data<T>();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) d[i] += a[i];
  });
}

}  // namespace wf::autograd
