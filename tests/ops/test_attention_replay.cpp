// attention_replay: handed what attention(q, k, v) returned without a graph, it returns those
// values unchanged and backpropagates exactly as attention does (bitwise: the same backward
// code on the same saved tensors), for gradients arriving at out and at lse, causal GQA with
// offsets included; and it rejects saved results of the wrong shape.
#include <catch2/catch.hpp>

#include "ops/ops_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/ops/ops.h"

using namespace wf;
using namespace wf::testing;

namespace {

struct Grads {
  Tensor out, lse, dq, dk, dv;
};

// Σ out·w_out + Σ lse·w_lse backpropagated through `attend` from fresh leaves.
template <class Attend>
Grads run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_out, const Tensor& w_lse, Attend attend) {
  Tensor ql = q.clone(), kl = k.clone(), vl = v.clone();
  for (Tensor* t : {&ql, &kl, &vl}) t->set_requires_grad(true);
  const AttentionResult r = attend(ql, kl, vl);
  TensorList roots{r.out}, grads{w_out};
  if (w_lse.defined()) {
    roots.push_back(r.lse);
    grads.push_back(w_lse);
  }
  autograd::backward(roots, grads);
  return {r.out.detach(), r.lse.detach(), ql.grad(), kl.grad(), vl.grad()};
}

}  // namespace

TEST_CASE("attention_replay backpropagates exactly like attention", "[ops][attention]") {
  AttentionOptions options;
  options.causal = true;
  options.q_offset = 4;
  options.kv_offset = 2;
  const Tensor q = random({2, 5, 4, 3}, 1), k = random({2, 6, 2, 3}, 2), v = random({2, 6, 2, 3}, 3);
  const Tensor w_out = random({2, 5, 4, 3}, 4);
  AttentionResult saved;
  {
    NoGradGuard no_grad;
    saved = attention(q, k, v, options);
  }
  const auto direct = [&](const Tensor& a, const Tensor& b, const Tensor& c) { return attention(a, b, c, options); };
  const auto replayed = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return attention_replay(a, b, c, options, saved);
  };
  for (const Tensor& w_lse : {Tensor(), random({2, 4, 5}, 5)}) {
    INFO("gradient at lse: " << w_lse.defined());
    const Grads want = run(q, k, v, w_out, w_lse, direct);
    const Grads got = run(q, k, v, w_out, w_lse, replayed);
    require_close(got.out, want.out, 0, 0);
    require_close(got.lse, want.lse, 0, 0);
    require_close(got.dq, want.dq, 0, 0);
    require_close(got.dk, want.dk, 0, 0);
    require_close(got.dv, want.dv, 0, 0);
  }
  // Nothing is computed: whatever is handed in comes back (here a deliberately wrong out).
  const AttentionResult fake{Tensor::zeros(q.shape(), DType::f64), saved.lse};
  require_close(attention_replay(q, k, v, options, fake).out, fake.out, 0, 0);
}

TEST_CASE("attention_replay rejects a saved result of the wrong shape", "[ops][attention]") {
  const Tensor q = random({1, 3, 2, 4}, 1), k = random({1, 3, 2, 4}, 2);
  const AttentionResult saved = attention(q, k, k);
  CHECK_THROWS_WITH(attention_replay(q, k, k, {}, AttentionResult{saved.lse, saved.lse}),
                    Catch::Contains("the saved result must be out [1, 3, 2, 4]"));
  CHECK_THROWS_WITH(attention_replay(q, k, k, {}, AttentionResult{saved.out, Tensor()}),
                    Catch::Contains("lse undefined"));
}
