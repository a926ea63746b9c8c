// attention: out and lse against the naive kernel reference (f32 to 1e-5, f64 to 1e-12),
// gradients of BOTH outputs against central differences (f64 gradcheck, default tolerances)
// for full, causal, GQA, offset and batched cases, f32 against f64, rows that see no key, and
// shape errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/attention_reference.h"
#include "ops/ops_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/ops/attention.h"

using namespace wf;
using namespace wf::testing;
namespace cpu = wf::kernels::cpu;

namespace {

struct Case {
  std::string name;
  std::int64_t batch, q_len, kv_len, heads, kv_heads, head_dim;
  AttentionOptions options;
};

AttentionOptions causal_at(std::int64_t q_offset, std::int64_t kv_offset) {
  AttentionOptions o;
  o.causal = true;
  o.q_offset = q_offset;
  o.kv_offset = kv_offset;
  return o;
}

// Tiny cases for gradcheck (at most 60 elements per input). Every query row sees at least one
// key, so lse is finite and can be weighted by gradcheck.
const std::vector<Case> kGradCases = {
    {"full", 1, 3, 5, 2, 2, 3, {}},
    {"full, explicit scale", 1, 3, 4, 2, 2, 3, {false, 0, 0, 0.7}},
    {"causal", 1, 4, 4, 2, 2, 3, causal_at(0, 0)},
    {"causal GQA h=4 h_kv=4", 1, 3, 3, 4, 4, 2, causal_at(0, 0)},
    {"causal GQA h=4 h_kv=2", 1, 3, 3, 4, 2, 2, causal_at(0, 0)},
    {"causal GQA h=4 h_kv=1", 1, 3, 3, 4, 1, 2, causal_at(0, 0)},
    {"full GQA h=4 h_kv=1", 1, 3, 4, 4, 1, 2, {}},
    // Queries at 5..7 against keys at 3..7: each row sees a different prefix of the block.
    {"offsets, partially masked block", 1, 3, 5, 2, 1, 3, causal_at(5, 3)},
    // Queries at 8..10 against keys at 0..4: causal, yet nothing is masked.
    {"offsets, block entirely in the past", 1, 3, 5, 2, 2, 3, causal_at(8, 0)},
    {"batch 2, odd lengths, causal GQA", 2, 3, 5, 2, 1, 3, causal_at(2, 0)},
    {"batch 2, odd lengths, full", 2, 3, 5, 2, 2, 2, {}},
};

cpu::AttentionShape kernel_shape(const Case& c) {
  cpu::AttentionShape s;
  s.batch = c.batch;
  s.q_len = c.q_len;
  s.kv_len = c.kv_len;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.causal = c.options.causal;
  s.q_offset = c.options.q_offset;
  s.kv_offset = c.options.kv_offset;
  s.scale = c.options.scale;
  return s;
}

struct Inputs {
  Tensor q, k, v;
};
Inputs make_inputs(const Case& c, std::uint64_t seed, DType dtype = DType::f64) {
  return {random({c.batch, c.q_len, c.heads, c.head_dim}, seed, dtype),
          random({c.batch, c.kv_len, c.kv_heads, c.head_dim}, seed + 1, dtype),
          random({c.batch, c.kv_len, c.kv_heads, c.head_dim}, seed + 2, dtype)};
}

// The reference kernel's out and lse, in f64.
AttentionResult reference(const Case& c, const Inputs& in) {
  AttentionResult r{Tensor::empty({c.batch, c.q_len, c.heads, c.head_dim}, DType::f64),
                    Tensor::empty({c.batch, c.heads, c.q_len}, DType::f64)};
  dispatch_float(in.q.dtype(), "test", [&](auto tag) {
    using T = decltype(tag);
    cpu::attention_forward_reference<T>(kernel_shape(c), in.q.data<T>(), in.k.data<T>(), in.v.data<T>(),
                                        r.out.data<double>(), r.lse.data<double>());
  });
  return r;
}

// Elementwise closeness where -inf (lse of a row that sees nothing) must match exactly.
void require_close_or_both_neg_inf(const Tensor& actual, const Tensor& expected, double tol) {
  REQUIRE(actual.shape() == expected.shape());
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.at(i), e = expected.at(i);
    INFO("element " << i << ": " << a << " vs " << e);
    if (std::isinf(e)) {
      REQUIRE(a == e);
    } else {
      REQUIRE(std::abs(a - e) <= tol + tol * std::abs(e));
    }
  }
}

TensorList attention_both(const TensorList& in, const AttentionOptions& options) {
  AttentionResult r = attention(in[0], in[1], in[2], options);
  return {r.out, r.lse};
}

Tensor leaf(const Tensor& t) {
  Tensor l = t.detach().clone();
  l.set_requires_grad(true);
  return l;
}

}  // namespace

TEST_CASE("attention matches the reference kernel", "[ops][attention]") {
  std::vector<Case> cases = kGradCases;
  // Longer than one kernel tile (128 query rows, 64/128 keys), with a causal offset.
  cases.push_back({"multi-tile causal GQA", 1, 130, 140, 2, 1, 4, causal_at(10, 0)});
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(c.name << " " << dtype_name(dtype));
      const Inputs in = make_inputs(c, 1, dtype);
      const AttentionResult got = attention(in.q, in.k, in.v, c.options);
      const AttentionResult want = reference(c, in);
      REQUIRE(got.out.dtype() == dtype);
      REQUIRE(got.lse.shape() == Shape{c.batch, c.heads, c.q_len});
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      require_close_or_both_neg_inf(got.out, want.out, tol);
      require_close_or_both_neg_inf(got.lse, want.lse, tol);
    }
  }
}

namespace {
// gradcheck of cases [first, last) of kGradCases; out and lse get independent random weights.
void gradcheck_out_and_lse(std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last; ++i) {
    const Case& c = kGradCases[i];
    INFO(c.name);
    const Inputs in = make_inputs(c, 100 + 10 * i);
    const AttentionOptions options = c.options;
    require_gradcheck([&](const TensorList& x) { return attention_both(x, options); },
                      {leaf(in.q), leaf(in.k), leaf(in.v)});
  }
}
}  // namespace

TEST_CASE("attention gradients of out and lse pass gradcheck: full, causal, GQA", "[ops][attention][gradcheck]") {
  gradcheck_out_and_lse(0, 7);
}

TEST_CASE("attention gradients of out and lse pass gradcheck: offsets, batch 2", "[ops][attention][gradcheck]") {
  gradcheck_out_and_lse(7, kGradCases.size());
}

TEST_CASE("attention gradient through lse alone", "[ops][attention][gradcheck]") {
  // Only lse is used: the output gradient arriving at `out` is all zeros, so every gradient
  // comes from d lse / d s = P (and v gets none).
  for (const Case& c : {kGradCases[2], kGradCases[4], kGradCases[7], kGradCases[9]}) {
    INFO(c.name);
    const Inputs in = make_inputs(c, 200);
    const AttentionOptions options = c.options;
    require_gradcheck([&](const TensorList& x) { return TensorList{attention(x[0], x[1], x[2], options).lse}; },
                      {leaf(in.q), leaf(in.k), leaf(in.v)});
  }
}

TEST_CASE("attention backward matches the reference kernel over several tiles", "[ops][attention]") {
  const Case c{"multi-tile causal GQA", 2, 70, 140, 4, 2, 4, causal_at(70, 0)};
  const Inputs in = make_inputs(c, 300);
  const Tensor d_out = random({c.batch, c.q_len, c.heads, c.head_dim}, 303);
  Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  attention(q, k, v, c.options).out.backward(d_out);

  Tensor dq = Tensor::empty(q.shape(), DType::f64), dk = Tensor::empty(k.shape(), DType::f64),
         dv = Tensor::empty(v.shape(), DType::f64);
  cpu::attention_backward_reference<double>(kernel_shape(c), in.q.data<double>(), in.k.data<double>(),
                                            in.v.data<double>(), d_out.data<double>(), dq.data<double>(),
                                            dk.data<double>(), dv.data<double>());
  require_close(q.grad(), dq, 1e-12, 1e-10);
  require_close(k.grad(), dk, 1e-12, 1e-10);
  require_close(v.grad(), dv, 1e-12, 1e-10);
}

TEST_CASE("attention in f32 agrees with f64, gradients of out and lse included", "[ops][attention]") {
  const Case c{"f32 vs f64", 2, 37, 53, 4, 2, 8, causal_at(16, 0)};
  const Inputs in64 = make_inputs(c, 400);
  const Tensor d_out = random({c.batch, c.q_len, c.heads, c.head_dim}, 403);
  const Tensor d_lse = random({c.batch, c.heads, c.q_len}, 404);

  auto run = [&](DType dtype) {
    Tensor q = leaf(in64.q.to(dtype)), k = leaf(in64.k.to(dtype)), v = leaf(in64.v.to(dtype));
    AttentionResult r = attention(q, k, v, c.options);
    autograd::backward({r.out, r.lse}, {d_out.to(dtype), d_lse.to(dtype)});
    return TensorList{r.out.detach(), r.lse.detach(), q.grad(), k.grad(), v.grad()};
  };
  const TensorList f32 = run(DType::f32), f64 = run(DType::f64);
  for (std::size_t i = 0; i < f64.size(); ++i) {
    INFO("result " << i << " (out, lse, dq, dk, dv)");
    REQUIRE(f32[i].dtype() == DType::f32);
    require_close(f32[i], f64[i], 1e-4, 1e-4);
  }
}

TEST_CASE("attention rows that see no key: out 0, lse -inf, zero and finite gradients", "[ops][attention]") {
  // Queries at 0..3, keys at 2..4: rows 0 and 1 see nothing.
  const Case c{"fully masked rows", 1, 4, 3, 2, 1, 3, causal_at(0, 2)};
  const Inputs in = make_inputs(c, 500);
  const AttentionOptions options = c.options;
  require_gradcheck([&](const TensorList& x) { return TensorList{attention(x[0], x[1], x[2], options).out}; },
                    {leaf(in.q), leaf(in.k), leaf(in.v)});

  Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  AttentionResult r = attention(q, k, v, options);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (std::int64_t h = 0; h < c.heads; ++h) {
    CHECK(r.lse.at({0, h, 0}) == neg_inf);
    CHECK(r.lse.at({0, h, 1}) == neg_inf);
    CHECK(std::isfinite(r.lse.at({0, h, 2})));
  }
  // A gradient arriving at every lse, the -inf ones included, contributes nothing through them.
  autograd::backward({r.out, r.lse},
                     {Tensor::ones(r.out.shape(), DType::f64), Tensor::ones(r.lse.shape(), DType::f64)});
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()}) {
    for (std::int64_t i = 0; i < g.numel(); ++i) REQUIRE(std::isfinite(g.at(i)));
  }
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t e = 0; e < c.head_dim; ++e) CHECK(q.grad().at({0, i, h, e}) == 0.0);
}

TEST_CASE("attention on bf16 computes in f32", "[ops][attention]") {
  const Case c{"bf16", 1, 5, 6, 2, 1, 4, causal_at(1, 0)};
  const Inputs in = make_inputs(c, 600, DType::f32);
  const Tensor q = in.q.to(DType::bf16), k = in.k.to(DType::bf16), v = in.v.to(DType::bf16);
  const AttentionResult got = attention(q, k, v, c.options);
  const AttentionResult want = attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), c.options);
  REQUIRE(got.out.dtype() == DType::bf16);
  REQUIRE(got.lse.dtype() == DType::bf16);
  require_close(got.out.to(DType::f32), want.out, 1e-2, 1e-2);
  require_close(got.lse.to(DType::f32), want.lse, 1e-2, 1e-2);
}

TEST_CASE("attention shape errors name the shapes", "[ops][attention][errors]") {
  const Tensor q = random({2, 3, 4, 8}, 700, DType::f32);
  const Tensor kv = random({2, 5, 2, 8}, 701, DType::f32);
  REQUIRE_THROWS_WITH(attention(random({2, 3, 32}, 702, DType::f32), kv, kv),
                      Catch::Contains("q must be [batch, q_len, heads, head_dim]") && Catch::Contains("[2, 3, 32]"));
  REQUIRE_THROWS_WITH(attention(q, kv, random({2, 6, 2, 8}, 703, DType::f32)),
                      Catch::Contains("[2, 5, 2, 8]") && Catch::Contains("[2, 6, 2, 8]"));
  const Tensor kv_batch = random({3, 5, 2, 8}, 704, DType::f32);
  REQUIRE_THROWS_WITH(attention(q, kv_batch, kv_batch),
                      Catch::Contains("[2, 3, 4, 8]") && Catch::Contains("[3, 5, 2, 8]") && Catch::Contains("batch"));
  const Tensor kv_dim = random({2, 5, 2, 4}, 705, DType::f32);
  REQUIRE_THROWS_WITH(attention(q, kv_dim, kv_dim),
                      Catch::Contains("[2, 3, 4, 8]") && Catch::Contains("[2, 5, 2, 4]") && Catch::Contains("head dim"));
  const Tensor kv_heads = random({2, 5, 3, 8}, 706, DType::f32);
  REQUIRE_THROWS_WITH(attention(q, kv_heads, kv_heads),
                      Catch::Contains("[2, 3, 4, 8]") && Catch::Contains("[2, 5, 3, 8]") && Catch::Contains("multiple"));
  REQUIRE_THROWS_WITH(attention(q, kv.to(DType::f64), kv), Catch::Contains("f64") && Catch::Contains("dtype"));
  REQUIRE_THROWS_WITH(attention(q, kv, kv, causal_at(-1, 0)), Catch::Contains("q_offset"));
}
