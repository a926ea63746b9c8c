// Packed documents (AttentionOptions::doc_bounds) in one process: attention() and block attention
// split per document must equal each document run alone through the naive f64 reference
// (reference_attention_documents), forward and backward with a gradient on lse, for documents
// shorter than, equal to and longer than a block of 4 tokens, one-token documents, one document
// over the whole sequence (= plain causal attention) and boundaries that differ per batch row;
// blocks with no pair of one document are skipped and the work counts only visible pairs; the
// strategies at sp = 1 honour the boundaries and give the CPU's bits on the test device; bad
// boundaries are clear errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "parallel/attention_testing.h"
#include "support/sp_cases.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/core/error.h"
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sequence_layout.h"

using Catch::Contains;
using wf::AttentionOptions;
using wf::Device;
using wf::DocumentBounds;
using wf::DType;
using wf::Tensor;
using wf::parallel::BlockAttentionStats;
using wf::parallel::TokenRun;
using wf::test::relative_error;
using wf::test::take_positions;

namespace {

constexpr std::int64_t kN = 16;
constexpr double kTolerance = 1e-12;  // f64

struct Documents {
  const char* name;
  DocumentBounds bounds;
};

// Blocks are 4 tokens below (4 ranks' zigzag halves of 2, or contiguous chunks of 4).
std::vector<Documents> document_layouts() {
  return {{"one document (plain attention)", {{0, kN}}},
          {"shorter than, equal to and longer than a block", {{0, 1, 3, 7, 11, 16}}},
          {"one-token documents", {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}},
          {"per-row boundaries", {{0, 9, 16}, {0, 2, 6, 7, 16}}}};
}

wf::test::ReferenceAttention reference(bool causal, const DocumentBounds& bounds, std::uint64_t seed) {
  wf::test::ReferenceAttention r = wf::test::reference_attention({2, kN, 4, 2, 4}, causal, DType::f64, seed);
  wf::test::reference_attention_documents(r, causal, bounds);
  return r;
}

bool same_bits(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(Device::cpu());
  return g.dtype() == want.dtype() && g.shape() == want.shape() &&
         std::memcmp(g.raw_data(), want.raw_data(), want.nbytes()) == 0;
}

}  // namespace

TEST_CASE("attention with packed documents equals each document alone, forward and backward",
          "[parallel][documents]") {
  const bool causal = GENERATE(true, false);
  for (const Documents& docs : document_layouts()) {
    INFO(docs.name << (causal ? ", causal" : ", full"));
    const wf::test::ReferenceAttention r = reference(causal, docs.bounds, 3);
    Tensor q = r.q.clone(), k = r.k.clone(), v = r.v.clone();
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
    const wf::AttentionResult out = wf::attention(q, k, v, {.causal = causal, .doc_bounds = docs.bounds});
    wf::autograd::backward({out.out, out.lse}, {r.d_o, r.d_lse});
    CHECK(relative_error(out.out, r.o) <= kTolerance);
    CHECK(relative_error(out.lse, r.lse) <= kTolerance);
    CHECK(relative_error(q.grad(), r.dq) <= kTolerance);
    CHECK(relative_error(k.grad(), r.dk) <= kTolerance);
    CHECK(relative_error(v.grad(), r.dv) <= kTolerance);
  }
}

TEST_CASE("attention with packed documents on bf16 inputs multiplies in bf16 within bf16 tolerance",
          "[parallel][documents][bf16]") {
  const Documents docs = document_layouts()[1];
  const wf::test::ReferenceAttention r = reference(true, docs.bounds, 4);
  Tensor q = r.q.to(DType::bf16), k = r.k.to(DType::bf16), v = r.v.to(DType::bf16);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
  const wf::AttentionResult out = wf::attention(q, k, v, {.causal = true, .doc_bounds = docs.bounds});
  wf::autograd::backward({out.out, out.lse}, {r.d_o.to(DType::bf16), r.d_lse.to(DType::bf16)});
  // Inputs rounded to bf16 against a reference of the unrounded ones (test_block_attention's bound).
  constexpr double kBf16 = 2e-2;
  CHECK(relative_error(out.out, r.o) <= kBf16);
  CHECK(relative_error(out.lse, r.lse) <= kBf16);
  CHECK(relative_error(q.grad(), r.dq) <= kBf16);
  CHECK(relative_error(k.grad(), r.dk) <= kBf16);
  CHECK(relative_error(v.grad(), r.dv) <= kBf16);
}

TEST_CASE("block attention with packed documents: every query block over every K/V block equals the documents alone",
          "[parallel][documents]") {
  const bool causal = GENERATE(true, false);
  const auto layout = causal ? wf::parallel::SequenceLayout::zigzag : wf::parallel::SequenceLayout::contiguous;
  constexpr int P = 4;
  for (const Documents& docs : document_layouts()) {
    INFO(docs.name << (causal ? ", causal zigzag" : ", full contiguous"));
    const wf::test::ReferenceAttention r = reference(causal, docs.bounds, 5);
    std::vector<std::vector<TokenRun>> runs(P);
    std::vector<std::vector<std::int64_t>> positions(P);
    for (int l = 0; l < P; ++l) {
      runs[l] = wf::parallel::rank_tokens(layout, kN, P, 1, l);
      positions[l] = wf::parallel::run_positions(runs[l]);
    }
    const auto rows = [&](const Tensor& t, int l) { return take_positions(t, 1, positions[l]); };
    Tensor o_all = Tensor::zeros(r.q.shape(), DType::f64), lse_all = Tensor::zeros(r.d_lse.shape(), DType::f64);
    Tensor dq_all = o_all.clone(), dk_all = Tensor::zeros(r.k.shape(), DType::f64), dv_all = dk_all.clone();
    std::vector<Tensor> dk(P), dv(P);
    for (int j = 0; j < P; ++j) {
      dk[j] = Tensor::zeros(rows(r.k, j).shape(), DType::f64);
      dv[j] = Tensor::zeros(dk[j].shape(), DType::f64);
    }
    BlockAttentionStats forward_work, off_diagonal;
    for (int l = 0; l < P; ++l) {
      const Tensor q = rows(r.q, l), d_o = rows(r.d_o, l), d_lse = take_positions(r.d_lse, 2, positions[l]);
      Tensor o = Tensor::zeros(q.shape(), DType::f64);
      Tensor lse = Tensor::full({2, 4, q.size(1)}, -std::numeric_limits<double>::infinity(), DType::f64);
      for (int j = 0; j < P; ++j) {
        const BlockAttentionStats w = wf::parallel::block_attention_forward(
            q, runs[l], rows(r.k, j), rows(r.v, j), runs[j], causal, 0, o, lse, docs.bounds);
        forward_work += w;
        if (j != l) off_diagonal += w;
      }
      Tensor dq = Tensor::zeros(q.shape(), DType::f64);
      for (int j = 0; j < P; ++j) {
        const BlockAttentionStats w = wf::parallel::block_attention_backward(
            q, runs[l], rows(r.k, j), rows(r.v, j), runs[j], causal, 0, o, lse, d_o, d_lse, dq, dk[j], dv[j],
            docs.bounds);
        CHECK(w.unmasked_pairs >= 0);
      }
      wf::test::put_positions(o_all, 1, positions[l], o);
      wf::test::put_positions(lse_all, 2, positions[l], lse);
      wf::test::put_positions(dq_all, 1, positions[l], dq);
    }
    for (int j = 0; j < P; ++j) {
      wf::test::put_positions(dk_all, 1, positions[j], dk[j]);
      wf::test::put_positions(dv_all, 1, positions[j], dv[j]);
    }
    CHECK(relative_error(o_all, r.o) <= kTolerance);
    CHECK(relative_error(lse_all, r.lse) <= kTolerance);
    CHECK(relative_error(dq_all, r.dq) <= kTolerance);
    CHECK(relative_error(dk_all, r.dk) <= kTolerance);
    CHECK(relative_error(dv_all, r.dv) <= kTolerance);
    // Only pairs of one document are computed, each once.
    CHECK(forward_work.unmasked_pairs == wf::test::document_pairs(docs.bounds, causal));
    std::int64_t blocks = 0;  // (query run, key run) pairs over every (query rank, K/V rank)
    for (const auto& q_runs : runs) {
      for (const auto& kv_runs : runs) blocks += static_cast<std::int64_t>(q_runs.size() * kv_runs.size());
    }
    CHECK(forward_work.blocks_computed + forward_work.blocks_skipped == blocks);
    // One-token documents: no block between two ranks holds a pair.
    if (static_cast<std::int64_t>(docs.bounds[0].size()) == kN + 1) {
      CHECK(off_diagonal.blocks_computed == 0);
      CHECK(off_diagonal.unmasked_pairs == 0);
    }
  }
}

TEST_CASE("block attention skips a block whose queries and keys share no document", "[parallel][documents]") {
  const Tensor q = Tensor::randn_at({1, 8, 2, 4}, 1, 0, DType::f64);
  const Tensor k = Tensor::randn_at({1, 8, 2, 4}, 2, 0, DType::f64);
  Tensor o = Tensor::zeros(q.shape(), DType::f64);
  Tensor lse = Tensor::full({1, 2, 8}, -std::numeric_limits<double>::infinity(), DType::f64);
  // Queries [8, 16) of the second document, keys [0, 8) of the first: visible without documents.
  const BlockAttentionStats w =
      wf::parallel::block_attention_forward(q, {{8, 8}}, k, k, {{0, 8}}, true, 0, o, lse, {{0, 8, 16}});
  CHECK(w == BlockAttentionStats{0, 1, 0});
  for (const double x : o.to_vector<double>()) CHECK(x == 0.0);
  for (const double x : lse.to_vector<double>()) CHECK(x == -std::numeric_limits<double>::infinity());
  // Without documents the same block is computed whole.
  CHECK(wf::parallel::block_attention_forward(q, {{8, 8}}, k, k, {{0, 8}}, true, 0, o, lse) ==
        BlockAttentionStats{1, 0, 64});
}

TEST_CASE("the strategies at sp = 1 honour packed documents and give the CPU's bits on the test device",
          "[parallel][documents][test_device]") {
  const AttentionOptions options{.causal = true, .doc_bounds = {{0, 3, 4, 8}, {0, 1, 2, 8}}};
  wf::nn::LocalAttention local;
  const wf::parity::StrategyResult want = wf::parity::run_strategy(local, DType::f64, Device::cpu(), options);
  const wf::parity::StrategyResult local_device = wf::parity::run_strategy(local, DType::f64, Device::test(), options);
  const wf::parity::StrategyResult& d = local_device;
  for (auto [got, expect] : {std::pair{&d.out, &want.out}, {&d.lse, &want.lse}, {&d.dq, &want.dq},
                             {&d.dk, &want.dk}, {&d.dv, &want.dv}}) {
    CHECK(same_bits(*got, *expect));
  }
  for (const auto strategy : {wf::parallel::SpStrategy::ring, wf::parallel::SpStrategy::ulysses,
                              wf::parallel::SpStrategy::wallfacer}) {
    INFO(wf::parallel::sp_strategy_name(strategy));
    const auto attention = wf::parity::attention_at_sp1(strategy);
    const wf::parity::StrategyResult cpu = wf::parity::run_strategy(*attention, DType::f64, Device::cpu(), options);
    const wf::parity::StrategyResult device = wf::parity::run_strategy(*attention, DType::f64, Device::test(), options);
    for (auto [got, expect, device_got] :
         {std::tuple{&cpu.out, &want.out, &device.out}, {&cpu.lse, &want.lse, &device.lse},
          {&cpu.dq, &want.dq, &device.dq}, {&cpu.dk, &want.dk, &device.dk}, {&cpu.dv, &want.dv, &device.dv}}) {
      CHECK(relative_error(*got, *expect) <= kTolerance);
      CHECK(same_bits(*device_got, *got));
    }
  }
}

TEST_CASE("bad document boundaries are clear errors", "[parallel][documents]") {
  const Tensor q = Tensor::randn_at({2, 8, 2, 4}, 1, 0, DType::f64);
  const auto run = [&](DocumentBounds bounds) {
    wf::attention(q, q, q, {.causal = true, .doc_bounds = std::move(bounds)});
  };
  CHECK_THROWS_WITH(run({{0, 8}, {0, 8}, {0, 8}}), Contains("3 boundary lists for a batch of 2 rows"));
  CHECK_THROWS_WITH(run({{1, 8}}), Contains("must be the cumulative document boundaries 0 = b0"));
  CHECK_THROWS_WITH(run({{0, 5, 5, 8}}), Contains("strictly increase"));
  CHECK_THROWS_WITH(run({{0, 4}}), Contains("= 8 of the sequence"));
  const auto ring = wf::parity::attention_at_sp1(wf::parallel::SpStrategy::ring);
  const AttentionOptions too_long{.causal = true, .doc_bounds = {{0, 9}}};
  CHECK_THROWS_WITH(wf::parity::run_strategy(*ring, DType::f64, Device::cpu(), too_long),
                    Contains("ring attention: doc_bounds[0] = [0, 9]"));
}
