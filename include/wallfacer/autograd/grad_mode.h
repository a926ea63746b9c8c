#pragma once
// Whether differentiable ops record graph nodes on this thread. On by default.
namespace wf::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// RAII: no graph recording inside the scope (inference, optimizer steps, checkpointed forwards).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// RAII: recording on inside the scope (a checkpoint's recompute runs inside a backward pass).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace wf::autograd

namespace wf {
using autograd::NoGradGuard;
}
