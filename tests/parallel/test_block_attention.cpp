// block_attention (block_attention.h) in one process: every rank's queries folded over every
// rank's K/V block, for both layouts, must equal attention over the whole sequence computed by
// the naive double-precision reference (kernels/cpu/attention_reference.h); the backward over
// all (query block, K/V block) pairs must give the reference gradients. Also: skipped blocks
// are counted and never touch the outputs, and bad arguments are clear errors.
//
// Tolerances: error = max|blocked − reference| / max|reference| over a whole tensor; f64 1e-12,
// f32 1e-5 (as the kernel tests); bf16 q, k, v, dO (f32 results) 2e-2: the inputs rounded to
// bf16 against a reference of the unrounded ones, and P, dS rounded before their products.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "parallel/attention_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sequence_layout.h"

using Catch::Contains;
using wf::DType;
using wf::Tensor;
using wf::parallel::BlockAttentionStats;
using wf::parallel::SequenceLayout;
using wf::parallel::TokenRun;
using wf::test::relative_error;
using wf::test::take_positions;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double tolerance(DType dtype) { return dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : 2e-2; }

struct Split {
  SequenceLayout layout;
  int P, C;
};

// Runs every rank's queries against every rank's K/V block (in ring order, starting from its
// own), forward then backward, and compares with the reference. Returns the unmasked pairs each
// query rank computed.
std::vector<std::int64_t> check_split(const wf::test::AttentionDimsForTest& s, const Split& split, bool causal,
                                      DType dtype) {
  // bf16 inputs: the reference in f32, its q, k, v, dO rounded; o, lse and the gradients f32.
  const DType acc = dtype == DType::bf16 ? DType::f32 : dtype;
  const wf::test::ReferenceAttention g =
      wf::test::reference_attention(s, causal, acc, 7 + static_cast<std::uint64_t>(split.P * 10 + split.C));
  const int P = split.P;
  std::vector<Tensor> q(P), k(P), v(P), d_o(P), d_lse(P), o(P), lse(P), dq(P), dk(P), dv(P);
  std::vector<std::vector<TokenRun>> runs(P);
  for (int l = 0; l < P; ++l) {
    runs[l] = wf::parallel::rank_tokens(split.layout, s.N, P, split.C, l);
    const auto shard = [&](const Tensor& t) { return wf::parallel::shard_sequence(t, split.layout, P, split.C, l); };
    q[l] = shard(g.q).to(dtype);
    k[l] = shard(g.k).to(dtype);
    v[l] = shard(g.v).to(dtype);
    d_o[l] = shard(g.d_o).to(dtype);
    d_lse[l] = take_positions(g.d_lse, 2, wf::parallel::run_positions(runs[l]));
    o[l] = Tensor::zeros(q[l].shape(), acc);
    lse[l] = Tensor::full(d_lse[l].shape(), -kInf, acc);
    dq[l] = Tensor::zeros(q[l].shape(), acc);
    dk[l] = Tensor::zeros(k[l].shape(), acc);
    dv[l] = Tensor::zeros(k[l].shape(), acc);
  }
  std::vector<std::int64_t> pairs(P, 0);
  for (int l = 0; l < P; ++l) {
    for (int step = 0; step < P; ++step) {
      const int src = (l - step + P) % P;
      const BlockAttentionStats stats = wf::parallel::block_attention_forward(
          q[l], runs[l], k[src], v[src], runs[src], causal, 0.0, o[l], lse[l]);
      CHECK(stats.blocks_computed + stats.blocks_skipped ==
            static_cast<std::int64_t>(runs[l].size() * runs[src].size()));
      CHECK(stats.unmasked_pairs == wf::parallel::unmasked_pairs(runs[l], runs[src], causal));
      pairs[l] += stats.unmasked_pairs;
    }
  }
  for (int l = 0; l < P; ++l) {
    for (int step = 0; step < P; ++step) {
      const int src = (l - step + P) % P;
      const BlockAttentionStats stats = wf::parallel::block_attention_backward(
          q[l], runs[l], k[src], v[src], runs[src], causal, 0.0, o[l], lse[l], d_o[l], d_lse[l], dq[l], dk[src],
          dv[src]);
      CHECK(stats.unmasked_pairs == wf::parallel::unmasked_pairs(runs[l], runs[src], causal));
    }
  }
  const double tol = tolerance(dtype);
  for (int l = 0; l < P; ++l) {
    INFO("rank " << l << " of " << P << " (runs " << runs[l].size() << ")");
    const auto shard = [&](const Tensor& t) { return wf::parallel::shard_sequence(t, split.layout, P, split.C, l); };
    CHECK(relative_error(o[l], shard(g.o)) <= tol);
    CHECK(relative_error(lse[l], take_positions(g.lse, 2, wf::parallel::run_positions(runs[l]))) <= tol);
    CHECK(relative_error(dq[l], shard(g.dq)) <= tol);
    CHECK(relative_error(dk[l], shard(g.dk)) <= tol);
    CHECK(relative_error(dv[l], shard(g.dv)) <= tol);
  }
  return pairs;
}

}  // namespace

TEST_CASE("block attention over every rank's K/V equals attention over the whole sequence", "[parallel]") {
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  const SequenceLayout layout = GENERATE(SequenceLayout::contiguous, SequenceLayout::zigzag);
  const bool causal = GENERATE(true, false);
  const std::int64_t h_kv = GENERATE(4, 2, 1);  // MHA, GQA, MQA with h = 4
  const std::int64_t B = GENERATE(1, 2);
  for (int P : {1, 2, 3, 4}) {
    for (int C = 1; C <= P; ++C) {
      if (P % C != 0) continue;
      // Three times the smallest valid length: never a power of two.
      const std::int64_t N = 3 * wf::parallel::sequence_length_multiple(layout, P, C);
      INFO(wf::dtype_name(dtype) << ", " << wf::parallel::sequence_layout_name(layout)
                                 << (causal ? ", causal" : ", full")
                                 << ", B = " << B << ", h_kv = " << h_kv << ", N = " << N << ", P = " << P
                                 << ", C = " << C);
      const std::vector<std::int64_t> pairs = check_split({B, N, 4, h_kv, 4}, {layout, P, C}, causal, dtype);
      std::int64_t total = 0;
      for (int l = 0; l < P; ++l) {
        total += pairs[l];
        if (C == 1) CHECK(pairs[l] == wf::parallel::ring_rank_work_pairs(layout, N, P, l, causal));
      }
      CHECK(total == (causal ? N * (N + 1) / 2 : N * N));
    }
  }
}

TEST_CASE("block attention skips fully masked blocks without touching the outputs", "[parallel]") {
  const DType dtype = GENERATE(DType::f64, DType::f32);
  // Queries [0, 4) + [12, 16) against keys [4, 8) + [8, 12): the first query run sees no key.
  const std::vector<TokenRun> q_runs{{0, 4}, {12, 4}}, kv_runs{{4, 4}, {8, 4}};
  const Tensor q = Tensor::randn_at({2, 8, 2, 3}, 1, 0, dtype);
  const Tensor k = Tensor::randn_at({2, 8, 1, 3}, 1, 100, dtype), v = Tensor::randn_at({2, 8, 1, 3}, 1, 200, dtype);
  Tensor o = Tensor::zeros({2, 8, 2, 3}, dtype), lse = Tensor::full({2, 2, 8}, -kInf, dtype);
  const BlockAttentionStats fwd =
      wf::parallel::block_attention_forward(q, q_runs, k, v, kv_runs, /*causal=*/true, 0.0, o, lse);
  CHECK(fwd.blocks_computed == 2);  // the second query run against both key runs, unmasked
  CHECK(fwd.blocks_skipped == 2);
  CHECK(fwd.unmasked_pairs == 4 * 8);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t head = 0; head < 2; ++head) {
        CHECK(lse.at({b, head, i}) == -kInf);
        CHECK(lse.at({b, head, i + 4}) > -kInf);
        for (std::int64_t c = 0; c < 3; ++c) CHECK(o.at({b, i, head, c}) == 0.0);
      }
    }
  }
  // Nothing but skipped blocks: no kernel runs and nothing changes, not even the lse.
  Tensor o2 = Tensor::zeros({2, 4, 2, 3}, dtype), lse2 = Tensor::full({2, 2, 4}, -kInf, dtype);
  const BlockAttentionStats none = wf::parallel::block_attention_forward(
      Tensor::randn_at({2, 4, 2, 3}, 2, 0, dtype), {{0, 4}}, k, v, kv_runs, true, 0.0, o2, lse2);
  CHECK(none.blocks_computed == 0);
  CHECK(none.blocks_skipped == 2);
  CHECK(none.unmasked_pairs == 0);
  CHECK(lse2.to_vector<double>() == std::vector<double>(16, -kInf));
  Tensor dq = Tensor::zeros({2, 4, 2, 3}, dtype), dk = Tensor::zeros(k.shape(), dtype),
         dv = Tensor::zeros(k.shape(), dtype);
  const BlockAttentionStats back = wf::parallel::block_attention_backward(
      Tensor::randn_at({2, 4, 2, 3}, 2, 0, dtype), {{0, 4}}, k, v, kv_runs, true, 0.0, o2, lse2,
      Tensor::ones({2, 4, 2, 3}, dtype), Tensor(), dq, dk, dv);
  CHECK(back.blocks_computed == 0);
  CHECK(dq.to_vector<double>() == std::vector<double>(48, 0.0));
  CHECK(dk.to_vector<double>() == std::vector<double>(48, 0.0));
}

TEST_CASE("block attention rejects runs and tensors that do not fit together", "[parallel]") {
  const Tensor q = Tensor::zeros({1, 4, 2, 3}, DType::f64), k = Tensor::zeros({1, 4, 1, 3}, DType::f64);
  Tensor o = Tensor::zeros({1, 4, 2, 3}, DType::f64), lse = Tensor::zeros({1, 2, 4}, DType::f64);
  const auto error_of = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const wf::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(q, {{0, 3}}, k, k, {{0, 4}}, true, 0, o, lse); }),
             Contains("query runs hold 3 tokens") && Contains("[1, 4, 2, 3]"));
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(q, {{0, 4}}, k, k, {{0, 5}}, true, 0, o, lse); }),
             Contains("key runs hold 5 tokens"));
  Tensor lse_f32 = Tensor::zeros({1, 2, 4}, DType::f32);
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(q, {{0, 4}}, k, k, {{0, 4}}, true, 0, o, lse_f32); }),
             Contains("lse must be f64 [1, 2, 4], got f32"));
  const Tensor k3 = Tensor::zeros({1, 4, 3, 3}, DType::f64);
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(q, {{0, 4}}, k3, k3, {{0, 4}}, true, 0, o, lse); }),
             Contains("kv heads dividing heads"));
  const Tensor qh = Tensor::zeros({1, 4, 2, 3}, DType::f16);
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(qh, {{0, 4}}, k, k, {{0, 4}}, true, 0, o, lse); }),
             Contains("f16 is not supported"));
  // bf16 inputs accumulate into f32.
  const Tensor qb = Tensor::zeros({1, 4, 2, 3}, DType::bf16), kb = Tensor::zeros({1, 4, 2, 3}, DType::bf16);
  Tensor ob = Tensor::zeros({1, 4, 2, 3}, DType::bf16);
  CHECK_THAT(error_of([&] { wf::parallel::block_attention_forward(qb, {{0, 4}}, kb, kb, {{0, 4}}, true, 0, ob, lse_f32); }),
             Contains("o must be f32 [1, 4, 2, 3], got bf16"));
}
