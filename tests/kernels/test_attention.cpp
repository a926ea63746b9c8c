// Blocked attention (kernels/cpu/attention.h) against the naive double-precision reference
// (kernels/cpu/attention_reference.h) on fresh random inputs.
//
// Tolerances: error = max|fast − reference| / max|reference| over a whole output. f64: 1e-10.
// f32: 1e-5 (float accumulation over tiles of ≤ 128 terms at these sizes stays near 1e-6).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_reference.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

using wf::kernels::cpu::AttentionShape;
namespace cpu = wf::kernels::cpu;

namespace {

using namespace wf::testing;

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
constexpr double kAttentionTolerance = tolerance<T>(1e-5, 1e-10);

std::int64_t q_size(const AttentionShape& s) { return s.batch * s.q_len * s.heads * s.head_dim; }
std::int64_t kv_size(const AttentionShape& s) { return s.batch * s.kv_len * s.kv_heads * s.head_dim; }
std::int64_t lse_size(const AttentionShape& s) { return s.batch * s.heads * s.q_len; }

template <class T>
struct Inputs {
  std::vector<T> q, k, v, d_o;
  std::vector<T> d_lse;  // empty: no gradient on lse
  const T* d_lse_or_null() const { return d_lse.empty() ? nullptr : d_lse.data(); }
};

template <class T>
Inputs<T> random_inputs(const AttentionShape& s, std::uint32_t seed, double qk_stddev = 1.0) {
  std::mt19937 gen(seed);
  // (A braced list evaluates left to right, so the draws are in a fixed order.)
  return {randn<T>(q_size(s), gen, qk_stddev), randn<T>(kv_size(s), gen, qk_stddev), randn<T>(kv_size(s), gen),
          randn<T>(q_size(s), gen), {}};
}

template <class T>
struct Outputs {
  std::vector<T> o, lse, dq, dk, dv;
};

// The blocked kernels: forward, then backward from its O and lse.
template <class T>
Outputs<T> run_fast(const AttentionShape& s, const Inputs<T>& in) {
  Outputs<T> out{std::vector<T>(q_size(s)), std::vector<T>(lse_size(s)), std::vector<T>(q_size(s)),
                 std::vector<T>(kv_size(s)), std::vector<T>(kv_size(s))};
  cpu::attention_forward(s, in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data());
  cpu::attention_backward(s, in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data(), in.d_o.data(),
                          out.dq.data(), out.dk.data(), out.dv.data(), /*accumulate=*/false, in.d_lse_or_null());
  return out;
}

template <class T>
Outputs<double> run_reference(const AttentionShape& s, const Inputs<T>& in) {
  Outputs<double> out{std::vector<double>(q_size(s)), std::vector<double>(lse_size(s)), std::vector<double>(q_size(s)),
                      std::vector<double>(kv_size(s)), std::vector<double>(kv_size(s))};
  cpu::attention_forward_reference(s, in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data());
  cpu::attention_backward_reference(s, in.q.data(), in.k.data(), in.v.data(), in.d_o.data(), out.dq.data(),
                                    out.dk.data(), out.dv.data(), in.d_lse_or_null());
  return out;
}

template <class T, class U>
void require_close(const Outputs<T>& got, const Outputs<U>& want, double tol) {
  CHECK(max_relative_error(got.o, want.o) <= tol);
  CHECK(max_relative_error(got.lse, want.lse) <= tol);
  CHECK(max_relative_error(got.dq, want.dq) <= tol);
  CHECK(max_relative_error(got.dk, want.dk) <= tol);
  CHECK(max_relative_error(got.dv, want.dv) <= tol);
}

template <class T>
void check_against_reference(const AttentionShape& s, std::uint32_t seed) {
  INFO("batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len << " heads " << s.heads << " kv_heads "
                << s.kv_heads << " head_dim " << s.head_dim << " causal " << s.causal << " q_offset " << s.q_offset
                << " kv_offset " << s.kv_offset << " dtype " << (sizeof(T) == 8 ? "f64" : "f32"));
  const Inputs<T> in = random_inputs<T>(s, seed);
  require_close(run_fast(s, in), run_reference(s, in), kAttentionTolerance<T>);
}

AttentionShape shape(std::int64_t batch, std::int64_t q_len, std::int64_t kv_len, std::int64_t heads,
                     std::int64_t kv_heads, std::int64_t head_dim, bool causal, std::int64_t q_offset = 0,
                     std::int64_t kv_offset = 0) {
  return AttentionShape{.batch = batch,
                        .q_len = q_len,
                        .kv_len = kv_len,
                        .heads = heads,
                        .kv_heads = kv_heads,
                        .head_dim = head_dim,
                        .causal = causal,
                        .q_offset = q_offset,
                        .kv_offset = kv_offset};
}

// Positions [j0, j1) of a [batch, kv_len, kv_heads, head_dim] tensor.
template <class T>
std::vector<T> kv_slice(const AttentionShape& s, const std::vector<T>& x, std::int64_t j0, std::int64_t j1) {
  const std::int64_t row = s.kv_heads * s.head_dim;
  std::vector<T> out;
  for (std::int64_t b = 0; b < s.batch; ++b)
    out.insert(out.end(), x.begin() + (b * s.kv_len + j0) * row, x.begin() + (b * s.kv_len + j1) * row);
  return out;
}

// The shape of the key block [j0, j1) of `s`, at its global position.
AttentionShape kv_block(const AttentionShape& s, std::int64_t j0, std::int64_t j1) {
  AttentionShape part = s;
  part.kv_len = j1 - j0;
  part.kv_offset = s.kv_offset + j0;
  return part;
}

}  // namespace

TEST_CASE("attention matches the reference: full or causal; MHA or GQA; batch 1 and 2", "[kernels][attention]") {
  std::uint32_t seed = 1;
  for (bool causal : {false, true})
    for (std::int64_t kv_heads : {4, 2, 1})
      for (std::int64_t batch : {1, 2}) {
        const AttentionShape s = shape(batch, 37, 53, 4, kv_heads, 16, causal);
        check_against_reference<double>(s, seed++);
        check_against_reference<float>(s, seed++);
      }
}

TEST_CASE("attention over several tiles with q_len != kv_len", "[kernels][attention]") {
  std::uint32_t seed = 100;
  for (bool causal : {false, true}) {
    // More rows and keys than one tile (forward 128×256, backward 64×128), and no multiple of one.
    for (auto [q_len, kv_len] : {std::pair<std::int64_t, std::int64_t>{150, 290}, {290, 150}, {131, 131}}) {
      const AttentionShape s = shape(1, q_len, kv_len, 2, 1, 8, causal);
      check_against_reference<double>(s, seed++);
      check_against_reference<float>(s, seed++);
    }
  }
}

TEST_CASE("attention with head_dim 1 or 16 or 64", "[kernels][attention]") {
  std::uint32_t seed = 200;
  for (std::int64_t head_dim : {1, 16, 64})
    for (bool causal : {false, true}) {
      const AttentionShape s = shape(1, 45, 70, 2, 2, head_dim, causal);
      check_against_reference<double>(s, seed++);
      check_against_reference<float>(s, seed++);
    }
}

TEST_CASE("attention causal offsets", "[kernels][attention]") {
  std::uint32_t seed = 300;
  SECTION("queries after the whole key block see every key") {
    const AttentionShape causal = shape(2, 37, 53, 4, 2, 16, true, 64, 0);
    const AttentionShape full = shape(2, 37, 53, 4, 2, 16, false);
    check_against_reference<double>(causal, seed);
    check_against_reference<float>(causal, seed + 1);
    const Inputs<double> in = random_inputs<double>(causal, seed + 2);
    require_close(run_fast(causal, in), run_fast(full, in), 0.0);  // same tiles, no mask: bitwise equal
  }
  SECTION("partial overlap over several tiles") {
    check_against_reference<double>(shape(1, 150, 290, 4, 2, 16, true, 100, 60), seed);
    check_against_reference<float>(shape(1, 150, 290, 4, 2, 16, true, 100, 60), seed + 1);
    check_against_reference<double>(shape(2, 90, 40, 2, 1, 16, true, 10, 50), seed + 2);
  }
  SECTION("keys all in the future of every query: lse = -inf, O = 0, gradients 0") {
    for (const AttentionShape& s : {shape(2, 37, 53, 4, 2, 16, true, 0, 64), shape(1, 5, 300, 2, 1, 8, true, 10, 20)}) {
      const Inputs<float> in = random_inputs<float>(s, seed++);
      const Outputs<float> out = run_fast(s, in);
      CHECK(std::all_of(out.lse.begin(), out.lse.end(),
                        [](float e) { return e == -std::numeric_limits<float>::infinity(); }));
      for (const auto* x : {&out.o, &out.dq, &out.dk, &out.dv})
        CHECK(std::all_of(x->begin(), x->end(), [](float e) { return e == 0.0f; }));
      check_against_reference<double>(s, seed++);
    }
  }
}

TEST_CASE("attention with an empty query or key block", "[kernels][attention]") {
  SECTION("kv_len = 0: every row fully masked, dQ = 0") {
    const AttentionShape s = shape(2, 7, 0, 2, 1, 4, false);
    const Inputs<double> in = random_inputs<double>(s, 400);
    const Outputs<double> out = run_fast(s, in);
    CHECK(std::all_of(out.lse.begin(), out.lse.end(), [](double e) { return e == -kInf; }));
    CHECK(std::all_of(out.o.begin(), out.o.end(), [](double e) { return e == 0.0; }));
    CHECK(std::all_of(out.dq.begin(), out.dq.end(), [](double e) { return e == 0.0; }));
  }
  SECTION("q_len = 0: dK = dV = 0") {
    const AttentionShape s = shape(1, 0, 9, 2, 2, 4, true);
    const Inputs<double> in = random_inputs<double>(s, 401);
    const Outputs<double> out = run_fast(s, in);
    CHECK(std::all_of(out.dk.begin(), out.dk.end(), [](double e) { return e == 0.0; }));
    CHECK(std::all_of(out.dv.begin(), out.dv.end(), [](double e) { return e == 0.0; }));
  }
}

TEST_CASE("attention with large logits does not overflow", "[kernels][attention]") {
  // q, k with stddev 20 at head_dim 16 and scale 1/4 give |scale·q·k| up to ~1e3.
  for (bool causal : {false, true}) {
    const AttentionShape s = shape(1, 40, 150, 2, 1, 16, causal);
    const Inputs<double> in64 = random_inputs<double>(s, 500, 20.0);
    const Outputs<double> want = run_reference(s, in64);
    CHECK(*std::max_element(want.lse.begin(), want.lse.end()) > 500.0);
    require_close(run_fast(s, in64), want, 1e-10);

    // f32 rounds s = q·k to ~1e3·6e-8 absolute, which exp turns into ~1e-4 relative error of P:
    // the problem, not the kernel, limits f32 here, so only finiteness and a loose bound.
    Inputs<float> in32;
    for (auto [dst, src] :
         {std::pair{&in32.q, &in64.q}, {&in32.k, &in64.k}, {&in32.v, &in64.v}, {&in32.d_o, &in64.d_o}})
      dst->assign(src->begin(), src->end());
    const Outputs<float> got = run_fast(s, in32);
    for (const auto* x : {&got.o, &got.lse, &got.dq, &got.dk, &got.dv}) CHECK(all_finite(*x));
    CHECK(max_relative_error(got.lse, want.lse) <= 1e-5);
    CHECK(max_relative_error(got.o, want.o) <= 1e-2);
  }
}

TEST_CASE("attention_merge of two key halves equals attention over all keys", "[kernels][attention]") {
  // Merges the halves in both orders and from an empty (O = 0, lse = -inf) start.
  auto check_merge = [](const AttentionShape& s, const Inputs<double>& in, std::int64_t split) {
    std::vector<double> o(q_size(s)), lse(lse_size(s));
    cpu::attention_forward(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
    std::vector<double> part_o[2], part_lse[2];
    const std::int64_t bounds[3] = {0, split, s.kv_len};
    for (int p = 0; p < 2; ++p) {
      const AttentionShape ps = kv_block(s, bounds[p], bounds[p + 1]);
      const std::vector<double> k = kv_slice(s, in.k, bounds[p], bounds[p + 1]);
      const std::vector<double> v = kv_slice(s, in.v, bounds[p], bounds[p + 1]);
      part_o[p].resize(q_size(s));
      part_lse[p].resize(lse_size(s));
      cpu::attention_forward(ps, in.q.data(), k.data(), v.data(), part_o[p].data(), part_lse[p].data());
    }
    for (int first : {0, 1}) {
      std::vector<double> mo = part_o[first], ml = part_lse[first];
      cpu::attention_merge(s.batch, s.q_len, s.heads, s.head_dim, mo.data(), ml.data(), part_o[1 - first].data(),
                           part_lse[1 - first].data());
      CHECK(max_relative_error(mo, o) <= 1e-12);
      CHECK(max_relative_error(ml, lse) <= 1e-12);
    }
    std::vector<double> mo(q_size(s), 0.0), ml(lse_size(s), -kInf);
    for (int p = 0; p < 2; ++p)
      cpu::attention_merge(s.batch, s.q_len, s.heads, s.head_dim, mo.data(), ml.data(), part_o[p].data(),
                           part_lse[p].data());
    CHECK(max_relative_error(mo, o) <= 1e-12);
    CHECK(max_relative_error(ml, lse) <= 1e-12);
    CHECK(all_finite(mo));
    return std::pair{part_lse[0], part_lse[1]};
  };

  SECTION("causal with -inf parts: rows that see no key, or only the first half") {
    // Query positions 0..69 against keys 10..89: rows 0–9 see nothing (both halves -inf),
    // rows 10–49 only the first half.
    const AttentionShape s = shape(2, 70, 80, 4, 2, 16, true, 0, 10);
    auto [lse_a, lse_b] = check_merge(s, random_inputs<double>(s, 600), 40);
    CHECK(std::count(lse_a.begin(), lse_a.end(), -kInf) > 0);
    CHECK(std::count(lse_b.begin(), lse_b.end(), -kInf) > std::count(lse_a.begin(), lse_a.end(), -kInf));
  }
  SECTION("lse of the halves more than 100 apart") {
    // Positive queries and keys shifted by +20 in the second half: its logits are ~150 higher.
    const AttentionShape s = shape(1, 33, 60, 2, 1, 16, false);
    Inputs<double> in = random_inputs<double>(s, 601);
    for (double& e : in.q) e = std::abs(e) + 1.0;
    for (std::int64_t e = kv_size(s) / 2; e < kv_size(s); ++e) in.k[e] += 20.0;
    auto [lse_a, lse_b] = check_merge(s, in, 30);
    double min_gap = kInf;
    for (std::size_t e = 0; e < lse_a.size(); ++e) min_gap = std::min(min_gap, lse_b[e] - lse_a[e]);
    CHECK(min_gap > 100.0);
  }
}

TEST_CASE("attention_backward accumulate adds into the gradient buffers", "[kernels][attention]") {
  const AttentionShape s = shape(2, 150, 140, 4, 2, 16, true, 30, 0);
  const Inputs<double> in = random_inputs<double>(s, 700);
  const Outputs<double> fresh = run_fast(s, in);

  SECTION("onto existing values") {
    std::mt19937 gen(701);
    const std::vector<double> dq0 = randn<double>(q_size(s), gen), dk0 = randn<double>(kv_size(s), gen),
                              dv0 = randn<double>(kv_size(s), gen);
    std::vector<double> dq = dq0, dk = dk0, dv = dv0;
    cpu::attention_backward(s, in.q.data(), in.k.data(), in.v.data(), fresh.o.data(), fresh.lse.data(), in.d_o.data(),
                            dq.data(), dk.data(), dv.data(), /*accumulate=*/true);
    auto plus = [](std::vector<double> a, const std::vector<double>& b) {
      for (std::size_t e = 0; e < a.size(); ++e) a[e] += b[e];
      return a;
    };
    CHECK(max_relative_error(dq, plus(dq0, fresh.dq)) <= 1e-12);
    CHECK(max_relative_error(dk, plus(dk0, fresh.dk)) <= 1e-12);
    CHECK(max_relative_error(dv, plus(dv0, fresh.dv)) <= 1e-12);
  }
  SECTION("ring style: key blocks with the final O and lse sum to the whole gradient") {
    std::vector<double> dq(q_size(s), 0.0);
    const std::int64_t bounds[3] = {0, 70, s.kv_len};
    for (int p = 0; p < 2; ++p) {
      const AttentionShape ps = kv_block(s, bounds[p], bounds[p + 1]);
      const std::vector<double> k = kv_slice(s, in.k, bounds[p], bounds[p + 1]);
      const std::vector<double> v = kv_slice(s, in.v, bounds[p], bounds[p + 1]);
      std::vector<double> dk(kv_size(ps), 0.0), dv(kv_size(ps), 0.0);
      cpu::attention_backward(ps, in.q.data(), k.data(), v.data(), fresh.o.data(), fresh.lse.data(), in.d_o.data(),
                              dq.data(), dk.data(), dv.data(), /*accumulate=*/true);
      CHECK(max_relative_error(dk, kv_slice(s, fresh.dk, bounds[p], bounds[p + 1])) <= 1e-12);
      CHECK(max_relative_error(dv, kv_slice(s, fresh.dv, bounds[p], bounds[p + 1])) <= 1e-12);
    }
    CHECK(max_relative_error(dq, fresh.dq) <= 1e-12);
  }
}

TEST_CASE("attention_backward with a gradient on lse", "[kernels][attention]") {
  // Rows 0–9 see no key (lse = -inf): their d_lse must not leak NaN into anything.
  const AttentionShape s = shape(2, 40, 150, 4, 2, 16, true, 0, 10);
  std::uint32_t seed = 900;
  auto with_d_lse = [&](auto tag) {
    using T = decltype(tag);
    Inputs<T> in = random_inputs<T>(s, seed++);
    std::mt19937 gen(seed++);
    in.d_lse = randn<T>(lse_size(s), gen);
    return in;
  };
  const Inputs<double> in64 = with_d_lse(0.0);
  require_close(run_fast(s, in64), run_reference(s, in64), kAttentionTolerance<double>);
  const Inputs<float> in32 = with_d_lse(0.0f);
  require_close(run_fast(s, in32), run_reference(s, in32), kAttentionTolerance<float>);
}

TEST_CASE("attention reference gradients match finite differences", "[kernels][attention]") {
  // Checks the oracle itself: L = Σ dO∘O + Σ d_lse∘lse, central differences in f64.
  const AttentionShape s = shape(1, 5, 7, 2, 1, 4, true, 3, 0);
  Inputs<double> in = random_inputs<double>(s, 1000);
  std::mt19937 gen(1001);
  in.d_lse = randn<double>(lse_size(s), gen);
  auto loss = [&]() {
    std::vector<double> o(q_size(s)), lse(lse_size(s));
    cpu::attention_forward_reference(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
    double l = 0;
    for (std::size_t e = 0; e < o.size(); ++e) l += in.d_o[e] * o[e];
    for (std::size_t e = 0; e < lse.size(); ++e) l += in.d_lse[e] * lse[e];
    return l;
  };
  const Outputs<double> grads = run_reference(s, in);
  for (auto [x, g] : {std::pair{&in.q, &grads.dq}, {&in.k, &grads.dk}, {&in.v, &grads.dv}}) {
    CHECK(max_relative_error(central_differences(*x, loss, 1e-6), *g) <= 1e-7);
  }
}

TEST_CASE("attention is bitwise deterministic and right at any thread count", "[kernels][attention]") {
  // kv_heads = 1 with several threads splits the key tiles into chunks with private dQ partials.
  const AttentionShape s = shape(1, 200, 300, 4, 1, 16, true, 40, 0);
  const Inputs<float> in = random_inputs<float>(s, 800);
  const Outputs<double> want = run_reference(s, in);
  ThreadCountGuard guard;
  for (int n : {1, 3}) {
    INFO("threads " << n);
    wf::set_num_threads(n);
    const Outputs<float> a = run_fast(s, in), b = run_fast(s, in);
    require_close(a, want, kAttentionTolerance<float>);
    for (auto [x, y] : {std::pair{&a.o, &b.o}, {&a.lse, &b.lse}, {&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv}})
      CHECK(std::memcmp(x->data(), y->data(), x->size() * sizeof(float)) == 0);
  }
}

TEST_CASE("attention rejects bad shapes with wf::Error", "[kernels][attention]") {
  std::vector<float> buf(4096, 0.0f);
  auto forward = [&](const AttentionShape& s) {
    cpu::attention_forward(s, buf.data(), buf.data(), buf.data(), buf.data(), buf.data());
  };
  CHECK_THROWS_AS(forward(shape(1, 4, 4, 3, 2, 8, false)), wf::Error);  // heads % kv_heads
  CHECK_THROWS_AS(forward(shape(1, 4, 4, 2, 2, 0, false)), wf::Error);  // head_dim 0
  CHECK_THROWS_AS(forward(shape(0, 4, 4, 2, 2, 8, false)), wf::Error);  // batch 0
  CHECK_THROWS_AS(forward(shape(1, -1, 4, 2, 2, 8, false)), wf::Error);
  CHECK_THROWS_AS(forward(shape(1, 4, 4, 2, 2, 8, true, -1, 0)), wf::Error);
  AttentionShape nan_scale = shape(1, 4, 4, 2, 2, 8, false);
  nan_scale.scale = std::nan("");
  CHECK_THROWS_AS(forward(nan_scale), wf::Error);
  CHECK_THROWS_AS(cpu::attention_forward<float>(shape(1, 4, 4, 2, 2, 8, false), nullptr, buf.data(), buf.data(),
                                                buf.data(), buf.data()),
                  wf::Error);
  CHECK_THROWS_AS(cpu::attention_merge<float>(1, 4, 0, 8, buf.data(), buf.data(), buf.data(), buf.data()), wf::Error);
}

// ---- bf16 operands ----------------------------------------------------------------------
// attention_{forward,backward}_bf16 against the double reference on the same values: inputs
// drawn in f32 and rounded to bf16, the reference fed their exact widening. What remains is the
// kernel's own rounding of P and dS to bf16 before their products (2^-9 relative each) on top of
// f32 accumulation: max|error| / max|reference| ≤ 1e-2 for every output (3.3e-3 the worst seen).
namespace {

std::vector<wf::bf16> rounded_bf16(std::vector<float>& x) {
  std::vector<wf::bf16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    out[i] = wf::float_to_bf16(x[i]);
    x[i] = wf::bf16_to_float(out[i]);  // the reference sees exactly the bf16 values
  }
  return out;
}

void check_bf16_against_reference(const AttentionShape& s, std::uint32_t seed, bool lse_gradient) {
  INFO("bf16: batch " << s.batch << " q_len " << s.q_len << " kv_len " << s.kv_len << " heads " << s.heads
                      << " kv_heads " << s.kv_heads << " head_dim " << s.head_dim << " causal " << s.causal
                      << " q_offset " << s.q_offset << " kv_offset " << s.kv_offset << " d_lse " << lse_gradient);
  Inputs<float> in = random_inputs<float>(s, seed);
  const auto q = rounded_bf16(in.q), k = rounded_bf16(in.k), v = rounded_bf16(in.v), d_o = rounded_bf16(in.d_o);
  if (lse_gradient) in.d_lse = randn<float, std::mt19937_64>(lse_size(s), seed + 7);
  Outputs<float> got{std::vector<float>(q_size(s)), std::vector<float>(lse_size(s)), std::vector<float>(q_size(s)),
                     std::vector<float>(kv_size(s)), std::vector<float>(kv_size(s))};
  cpu::attention_forward_bf16(s, q.data(), k.data(), v.data(), got.o.data(), got.lse.data());
  cpu::attention_backward_bf16(s, q.data(), k.data(), v.data(), got.o.data(), got.lse.data(), d_o.data(),
                               got.dq.data(), got.dk.data(), got.dv.data(), /*accumulate=*/false, in.d_lse_or_null());
  require_close(got, run_reference(s, in), 1e-2);
}

}  // namespace

TEST_CASE("bf16 attention: dot products in bf16 match the reference to bf16 accuracy", "[kernels][attention][gemm_bf16]") {
  std::uint32_t seed = 500;
  for (bool causal : {false, true}) {
    check_bf16_against_reference(shape(1, 37, 37, 2, 2, 16, causal), seed++, false);
    check_bf16_against_reference(shape(2, 150, 300, 4, 2, 64, causal, 150, 0), seed++, false);  // GQA, tiles, offset
    check_bf16_against_reference(shape(1, 64, 64, 2, 1, 32, causal), seed++, true);
  }
  ThreadCountGuard threads(2);
  check_bf16_against_reference(shape(1, 300, 300, 4, 4, 64, true), seed++, false);
}

// ---- key windows: packed documents inside one call (AttentionShape::windows) ---------------------
namespace {

// The windows documents give a call, found by brute force: query row i sees the keys j of its own
// document (and with causal not after it), whose rows form one range by construction.
struct DocumentLists {
  std::vector<std::vector<std::int64_t>> bounds;  // one list shared by every row, or one per row
  std::vector<wf::kernels::KeyRange> ranges;
  explicit DocumentLists(std::vector<std::vector<std::int64_t>> b) : bounds(std::move(b)) {}
  // s with the windows (they live in this object until the next call).
  AttentionShape applied_to(AttentionShape s) {
    const auto document = [](const std::vector<std::int64_t>& b, std::int64_t p) {
      return std::upper_bound(b.begin(), b.end(), p) - b.begin();
    };
    ranges.clear();
    for (const auto& b : bounds)
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        const std::int64_t p = s.q_offset + i;
        std::vector<std::int64_t> seen;
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          const std::int64_t key = s.kv_offset + j;
          if (document(b, key) == document(b, p) && (!s.causal || key <= p)) seen.push_back(j);
        }
        REQUIRE((seen.empty() || seen.back() - seen.front() + 1 == std::int64_t(seen.size())));
        // A row that sees nothing: the empty window where its document's keys would start.
        const std::int64_t start = std::clamp<std::int64_t>(b[document(b, p) - 1] - s.kv_offset, 0, s.kv_len);
        ranges.push_back(seen.empty() ? wf::kernels::KeyRange{start, start}
                                      : wf::kernels::KeyRange{seen.front(), seen.back() + 1});
      }
    s.windows = {ranges.data(), std::int64_t(bounds.size())};
    return s;
  }
};

// Documents of 1 to max_len tokens (one-token ones included by the draw) covering [0, end).
std::vector<std::int64_t> random_bounds(std::mt19937& gen, std::int64_t end, std::int64_t max_len) {
  std::vector<std::int64_t> b{0};
  std::uniform_int_distribution<std::int64_t> len(1, max_len);
  std::bernoulli_distribution tiny(0.2);
  while (b.back() < end) b.push_back(std::min(end, b.back() + (tiny(gen) ? 1 : len(gen))));
  return b;
}

template <class T>
void check_documents(const AttentionShape& s, DocumentLists docs, std::uint32_t seed) {
  const AttentionShape ds = docs.applied_to(s);
  INFO("documents: " << docs.bounds.size() << " lists; batch " << s.batch << " q_len "
                           << s.q_len << " kv_len " << s.kv_len << " causal " << s.causal << " q_offset "
                           << s.q_offset << " kv_offset " << s.kv_offset << " dtype " << (sizeof(T) == 8 ? "f64" : "f32"));
  Inputs<T> in = random_inputs<T>(ds, seed);
  std::mt19937 gen(seed + 1);
  in.d_lse = randn<T>(lse_size(ds), gen);
  const Outputs<T> got = run_fast(ds, in);
  require_close(got, run_reference(ds, in), kAttentionTolerance<T>);
  for (const auto* v : {&got.o, &got.dq, &got.dk, &got.dv})
    CHECK(std::none_of(v->begin(), v->end(), [](T x) { return std::isnan(x); }));
}

}  // namespace

TEST_CASE("attention with packed documents: each query sees its own document only", "[kernels][attention][documents]") {
  std::uint32_t seed = 1200;
  std::mt19937 gen(77);
  for (bool causal : {true, false}) {
    // One list shared by both rows: one-token documents, short and long ones, across every tile edge.
    DocumentLists shared({{0, 1, 2, 3, 50, 180, 181, 300}});
    check_documents<double>(shape(2, 300, 300, 4, 2, 16, causal), shared, seed++);
    check_documents<float>(shape(2, 300, 300, 4, 2, 16, causal), shared, seed++);
    // A list per batch row, random lengths.
    DocumentLists rows({random_bounds(gen, 700, 200), random_bounds(gen, 700, 40)});
    check_documents<double>(shape(2, 700, 700, 2, 1, 8, causal), rows, seed++);
    check_documents<float>(shape(2, 700, 700, 2, 1, 8, causal), rows, seed++);
    // A ring block: queries [300, 450) against keys [100, 400) of documents over [0, 600); some
    // queries see none of these keys (lse −inf, zero gradients).
    DocumentLists ring({random_bounds(gen, 600, 90), {0, 120, 330, 340, 600}});
    check_documents<double>(shape(2, 150, 300, 4, 4, 16, causal, 300, 100), ring, seed++);
    check_documents<double>(shape(2, 300, 150, 4, 4, 16, causal, 100, 300), ring, seed++);
    // Every document one token: each query sees itself alone.
    std::vector<std::int64_t> ones(201);
    for (std::int64_t i = 0; i <= 200; ++i) ones[std::size_t(i)] = i;
    check_documents<double>(shape(1, 200, 200, 2, 2, 16, causal), DocumentLists({ones}), seed++);
  }
  ThreadCountGuard threads(2);
  check_documents<float>(shape(2, 700, 700, 4, 2, 16, true), DocumentLists({random_bounds(gen, 700, 300)}), seed++);
}

TEST_CASE("attention with one document over the whole sequence is the plain causal kernel bit for bit",
          "[kernels][attention][documents]") {
  for (bool causal : {true, false}) {
    const AttentionShape s = shape(2, 400, 400, 4, 2, 16, causal, 0, 0);
    DocumentLists one({{0, 400}});
    const Inputs<float> in = random_inputs<float>(s, 1300);
    const Outputs<float> plain = run_fast(s, in), documented = run_fast(one.applied_to(s), in);
    CHECK(plain.o == documented.o);
    CHECK(plain.lse == documented.lse);
    CHECK(plain.dq == documented.dq);
    CHECK(plain.dk == documented.dk);
    CHECK(plain.dv == documented.dv);
  }
}

TEST_CASE("bf16 attention with packed documents matches the reference to bf16 accuracy",
          "[kernels][attention][documents][gemm_bf16]") {
  std::mt19937 gen(91);
  for (bool causal : {true, false}) {
    DocumentLists docs({random_bounds(gen, 300, 120), random_bounds(gen, 300, 60)});
    check_bf16_against_reference(docs.applied_to(shape(2, 300, 300, 4, 2, 64, causal)), 1400 + causal, true);
  }
}

TEST_CASE("attention refuses key windows that do not fit the call", "[kernels][attention][documents]") {
  const AttentionShape s = shape(2, 10, 10, 1, 1, 8, true);
  const Inputs<double> in = random_inputs<double>(s, 1500);
  std::vector<double> o(q_size(s)), lse(lse_size(s));
  DocumentLists three({{0, 10}, {0, 5, 10}, {0, 10}});
  CHECK_THROWS_WITH(cpu::attention_forward(three.applied_to(s), in.q.data(), in.k.data(), in.v.data(), o.data(),
                                           lse.data()),
                    Catch::Contains("3 lists for a batch of 2") && Catch::Contains("one per row"));
  DocumentLists two({{0, 5, 10}});
  AttentionShape bad = two.applied_to(s);
  two.ranges[6] = {0, 7};  // row 6 starts before row 5's window: not monotone
  CHECK_THROWS_WITH(cpu::attention_forward(bad, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()),
                    Catch::Contains("key window 6 of list 0 is [0, 7) after [5, 6)") && Catch::Contains("ascending"));
  two.ranges[6] = {5, 11};  // past kv_len
  CHECK_THROWS_WITH(cpu::attention_forward(bad, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data()),
                    Catch::Contains("[0, kv_len = 10)"));
}
