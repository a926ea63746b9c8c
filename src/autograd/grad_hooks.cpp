#include "wallfacer/autograd/grad_hooks.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "wallfacer/core/error.h"

namespace wf::autograd {
namespace {

using Hook = std::function<void(const Tensor& leaf)>;
enum class Kind { accumulated = 0, ready = 1 };
const char* const kSetter[] = {"set_grad_accumulated_hook", "set_grad_ready_hook"};

struct Entry {
  std::weak_ptr<TensorImpl> leaf;     // the key's owner: an expired entry belongs to a dead leaf
  std::shared_ptr<Hook> hooks[2];     // by Kind; null = none
};

// Keyed by address; the weak pointer tells a live leaf from a new tensor at a reused address.
struct Registry {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, Entry> entries;
  std::atomic<std::size_t> size{0};  // lets the hot paths skip the lock when no hook is set
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: AccumulateGrad may run during static destruction
  return *r;
}

void set_hook(Kind kind, const Tensor& leaf, Hook hook) {
  const char* setter = kSetter[static_cast<int>(kind)];
  WF_CHECK(leaf.defined(), "{}: the tensor is undefined", setter);
  WF_CHECK(leaf.grad_fn() == nullptr,
           "{}: the tensor (shape {}) has a grad_fn, so its gradient is never accumulated; hook a leaf (a "
           "parameter) instead",
           setter, shape_str(leaf.shape()));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.entries, [](const auto& kv) { return kv.second.leaf.expired(); });
  Entry& e = r.entries[leaf.impl_ptr().get()];
  if (e.leaf.lock() != leaf.impl_ptr()) e = Entry{leaf.impl_ptr(), {}};
  e.hooks[static_cast<int>(kind)] = std::make_shared<Hook>(std::move(hook));
  r.size = r.entries.size();
}

void clear_hook(Kind kind, const Tensor& leaf) {
  if (!leaf.defined()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.entries.find(leaf.impl_ptr().get());
  if (it == r.entries.end()) return;
  it->second.hooks[static_cast<int>(kind)].reset();
  if (!it->second.hooks[0] && !it->second.hooks[1]) r.entries.erase(it);
  r.size = r.entries.size();
}

void run_hook(Kind kind, const std::shared_ptr<TensorImpl>& leaf) {
  Registry& r = registry();
  if (r.size.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<Hook> hook;
  {
    std::lock_guard lock(r.mutex);
    const auto it = r.entries.find(leaf.get());
    if (it == r.entries.end() || it->second.leaf.lock() != leaf) return;
    hook = it->second.hooks[static_cast<int>(kind)];
  }
  if (hook) (*hook)(Tensor(leaf));  // outside the lock: the hook may set or clear hooks
}

}  // namespace

void set_grad_accumulated_hook(const Tensor& leaf, GradAccumulatedHook hook) {
  set_hook(Kind::accumulated, leaf, std::move(hook));
}
void clear_grad_accumulated_hook(const Tensor& leaf) { clear_hook(Kind::accumulated, leaf); }
void set_grad_ready_hook(const Tensor& leaf, GradReadyHook hook) { set_hook(Kind::ready, leaf, std::move(hook)); }
void clear_grad_ready_hook(const Tensor& leaf) { clear_hook(Kind::ready, leaf); }

void run_grad_accumulated_hook(const std::shared_ptr<TensorImpl>& leaf) { run_hook(Kind::accumulated, leaf); }
void run_grad_ready_hook(const std::shared_ptr<TensorImpl>& leaf) { run_hook(Kind::ready, leaf); }

}  // namespace wf::autograd
