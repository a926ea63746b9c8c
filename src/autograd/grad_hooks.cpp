#include "wallfacer/autograd/grad_hooks.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "wallfacer/core/error.h"

namespace wf::autograd {
namespace {

struct Entry {
  std::weak_ptr<TensorImpl> leaf;  // the key's owner: an expired entry belongs to a dead leaf
  std::shared_ptr<GradAccumulatedHook> hook;
};

// Keyed by address; the weak pointer tells a live leaf from a new tensor at a reused address.
struct Registry {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, Entry> entries;
  std::atomic<std::size_t> size{0};  // lets AccumulateGrad skip the lock when no hook is set
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: AccumulateGrad may run during static destruction
  return *r;
}

}  // namespace

void set_grad_accumulated_hook(const Tensor& leaf, GradAccumulatedHook hook) {
  WF_CHECK(leaf.defined(), "set_grad_accumulated_hook: the tensor is undefined");
  WF_CHECK(leaf.grad_fn() == nullptr,
           "set_grad_accumulated_hook: the tensor (shape {}) has a grad_fn, so its gradient is never accumulated; "
           "hook a leaf (a parameter) instead",
           shape_str(leaf.shape()));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.entries, [](const auto& kv) { return kv.second.leaf.expired(); });
  r.entries[leaf.impl_ptr().get()] = Entry{leaf.impl_ptr(), std::make_shared<GradAccumulatedHook>(std::move(hook))};
  r.size = r.entries.size();
}

void clear_grad_accumulated_hook(const Tensor& leaf) {
  if (!leaf.defined()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.erase(leaf.impl_ptr().get());
  r.size = r.entries.size();
}

void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf) {
  Registry& r = registry();
  if (r.size.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<GradAccumulatedHook> hook;
  {
    std::lock_guard lock(r.mutex);
    const auto it = r.entries.find(leaf.get());
    if (it == r.entries.end() || it->second.leaf.lock() != leaf) return;
    hook = it->second.hook;
  }
  (*hook)(Tensor(leaf));  // outside the lock: the hook may set or clear hooks
}

}  // namespace wf::autograd

// TEMP: never fires (the reducer then starts everything at the end of the backward).
namespace wf::autograd {
void set_grad_ready_hook(const Tensor&, GradReadyHook) {}
void clear_grad_ready_hook(const Tensor&) {}
}  // namespace wf::autograd
