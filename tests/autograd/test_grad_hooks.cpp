// The per-leaf "gradient accumulated" hook (autograd/grad_hooks.h): when it fires, what grad()
// holds then, and how often under tied uses and activation checkpointing's nested backward.
// The "gradient ready" hook has its own file, test_grad_ready.cpp.
#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/checkpoint.h"
#include "wallfacer/autograd/grad_hooks.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

// Records every fire of the hooked leaves: a copy of grad() at that moment, per leaf.
struct FireLog {
  std::map<const TensorImpl*, std::vector<Tensor>> seen;
  void hook(const Tensor& leaf) {
    autograd::set_grad_accumulated_hook(
        leaf, [this](const Tensor& l) { seen[l.impl_ptr().get()].push_back(l.grad().clone()); });
  }
  const std::vector<Tensor>& of(const Tensor& leaf) { return seen[leaf.impl_ptr().get()]; }
};

}  // namespace

TEST_CASE("grad hook fires once per leaf of a plain backward, with the final gradient", "[autograd][grad_hooks]") {
  Tensor w = random_leaf({4, 3}, 31), bias = random_leaf({4}, 32), x = random_leaf({2, 3}, 33);
  FireLog log;
  for (const Tensor* t : {&w, &bias, &x}) log.hook(*t);
  gelu(linear(x, w, bias)).backward(random({2, 4}, 34));
  for (const Tensor* t : {&w, &bias, &x}) {
    REQUIRE(log.of(*t).size() == 1);
    require_close(log.of(*t)[0], t->grad(), 0, 0);
  }

  // A second backward accumulates: the hook sees the sum.
  gelu(linear(x, w, bias)).backward(random({2, 4}, 35));
  REQUIRE(log.of(w).size() == 2);
  require_close(log.of(w)[1], w.grad(), 0, 0);

  // Cleared hooks stay silent.
  for (const Tensor* t : {&w, &bias, &x}) autograd::clear_grad_accumulated_hook(*t);
  gelu(linear(x, w, bias)).backward(random({2, 4}, 36));
  CHECK(log.of(w).size() == 2);
}

TEST_CASE("grad hook fires once for a leaf used twice, after the sum of both uses", "[autograd][grad_hooks]") {
  // w feeds two recorded ops (a tied weight): both share w's one AccumulateGrad sink, which the
  // engine runs once with the sum.
  Tensor w = random_leaf({3}, 41), a = random({3}, 42), b = random({3}, 43);
  FireLog log;
  log.hook(w);
  sum(add(mul(w, a), mul(w, b))).backward();
  REQUIRE(log.of(w).size() == 1);
  require_close(log.of(w)[0], w.grad(), 0, 0);
  require_close(w.grad(), add(a, b), 1e-15, 1e-15);
  autograd::clear_grad_accumulated_hook(w);
}

TEST_CASE("grad hook fires inside checkpoint's nested backward, once per recomputed use", "[autograd][grad_hooks]") {
  // One weight in two checkpointed segments: the outer graph never sees it; each segment's
  // recompute differentiates it in a nested backward during the outer one.
  Tensor w = random_leaf({3, 3}, 51), x = random_leaf({2, 3}, 52);
  const auto segment = [&](const autograd::TensorList& in) { return autograd::TensorList{tanh(linear(in[0], w))}; };
  FireLog log;
  log.hook(w);
  log.hook(x);
  const Tensor h = autograd::checkpoint(segment, {x})[0];
  const Tensor y = autograd::checkpoint(segment, {h})[0];
  CHECK(log.of(w).empty());  // the forward records nothing for w
  sum(y).backward();
  REQUIRE(log.of(w).size() == 2);  // once per nested backward
  REQUIRE(log.of(x).size() == 1);  // x is a leaf of the outer graph
  require_close(log.of(w)[1], w.grad(), 0, 0);

  // The same gradient without checkpointing: the hook count differs, the result does not.
  const Tensor checkpointed = w.grad().clone();
  w.set_grad(Tensor());
  x.set_grad(Tensor());
  sum(segment({segment({x})[0]})[0]).backward();
  CHECK(log.of(w).size() == 3);  // two recorded uses of w, one sink
  require_close(w.grad(), checkpointed, 1e-14, 1e-14);
  autograd::clear_grad_accumulated_hook(w);
  autograd::clear_grad_accumulated_hook(x);
}

TEST_CASE("grad hook: leaves only; a hook of a destroyed leaf never runs", "[autograd][grad_hooks]") {
  Tensor w = random_leaf({2}, 61);
  const Tensor y = mul(w, w);
  CHECK_THROWS_WITH(autograd::set_grad_accumulated_hook(y, [](const Tensor&) {}),
                    Catch::Matchers::Contains("hook a leaf"));

  int fired = 0;
  {
    Tensor dead = random_leaf({2}, 62);
    autograd::set_grad_accumulated_hook(dead, [&](const Tensor&) { ++fired; });
  }
  // New leaves (possibly at the dead one's address) are not hooked.
  for (int i = 0; i < 8; ++i) {
    Tensor fresh = random_leaf({2}, 63 + i);
    sum(fresh).backward();
  }
  CHECK(fired == 0);
}
