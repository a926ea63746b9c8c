// The ulysses-wallfacer hybrid (src/parallel/ulysses_wallfacer_attention.cpp) with the whole world
// as one sp group of U Ulysses ranks × P/U WallFacer ranks, for every U strictly between 1 and P
// (P = 4: U = 2 with C = 1; P = 8: U = 2 with C = 1 and 2, U = 4 with C = 1), both orders of
// the two dimensions; smaller worlds have no such U and skip.
//
// Through the shared run_sp_case (sp_testing.h): output, lse and dQ, dK, dV against naive f64
// attention (f64 ≤ 1e-10, f32 ≤ 1e-5 relative), the traffic counters of the sp groups against
// traffic_model.h's ulysses_wallfacer_traffic per rank and summed, and every rank's attention
// work; causal (zigzag) and full (contiguous), MHA and GQA with the kv heads split over U and
// replicated (h_kv < U). Then: U = 1 and U = P are wallfacer and ulysses bit for bit, and bf16
// inputs (moved as bf16) match the reference within bf16 tolerance, with bf16 traffic.
// Sizes are tiny (N = 6·P zigzag, 5·P contiguous, d = 8).
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "parallel/attention_testing.h"
#include "sp_testing.h"
#include "wallfacer/autograd/engine.h"

using wf::DType;
using wf::Tensor;
using wf::parallel::SpStrategy;
using namespace wf::test;

namespace {

struct HybridLayout {
  int U, C;
};

// Every (U, C) of the world with 1 < U < P, U | P, C ≤ 2 and C² | P/U.
std::vector<HybridLayout> hybrid_layouts() {
  const int P = runtime().world_size();
  std::vector<HybridLayout> out;
  for (int U = 2; U < P; ++U) {
    if (P % U != 0) continue;
    for (int C : wf::comm::valid_team_sizes(P / U)) {
      if (C <= 2) out.push_back({U, C});
    }
  }
  return out;
}

SpCase hybrid_case(HybridLayout l, bool ulysses_inner, bool causal, std::int64_t h_kv, DType dtype) {
  SpCase c;
  c.strategy = SpStrategy::ulysses_wallfacer;
  c.U = l.U;
  c.C = l.C;
  c.ulysses_inner = ulysses_inner;
  c.causal = causal;
  c.B = 2;
  c.h = 4;
  c.h_kv = h_kv;
  c.d = 8;
  c.dtype = dtype;
  const int P = runtime().world_size();
  c.N = causal ? 6 * P : 5 * P;  // zigzag needs 2P | N; never a power of two
  return c;
}

}  // namespace

TEST_CASE("ulysses-wallfacer attention: output, lse and gradients against f64 attention, traffic and work per rank",
          "[dist][sp][ulysses_wallfacer]") {
  const std::vector<HybridLayout> layouts = hybrid_layouts();
  if (layouts.empty()) {
    SUCCEED("no U with 1 < U < P at this world size");
    return;
  }
  double worst = 0;
  int cases = 0;
  for (const HybridLayout& l : layouts) {
    for (bool inner : {true, false}) {
      for (bool causal : {true, false}) {
        // h_kv 4: MHA; 2: GQA split over U = 2, replicated at U = 4; 1: replicated on every rank.
        for (std::int64_t h_kv : {4, 2, 1}) {
          worst = std::max(worst, run_sp_case(hybrid_case(l, inner, causal, h_kv, DType::f64)).max_error());
          ++cases;
        }
      }
    }
    // f32, and the redispatching backward.
    SpCase c = hybrid_case(l, true, true, 2, DType::f32);
    c.keep_forward_kv = false;
    run_sp_case(c);
    ++cases;
  }
  if (runtime().rank() == 0) {
    fmt::print("ulysses-wallfacer P = {}: {} cases, worst f64 relative error {:.1e}\n", runtime().world_size(), cases,
               worst);
  }
}

TEST_CASE("ulysses-wallfacer with U = 1 is wallfacer and with U = P is ulysses, bit for bit",
          "[dist][sp][ulysses_wallfacer]") {
  const int P = runtime().world_size();
  if (P < 2) return;
  // The hybrid case against the same case under `plain` (on the grid of U = 1).
  const auto same_as = [](SpCase c, SpStrategy plain) {
    const SpCaseResult hybrid = run_sp_case(c);
    c.strategy = plain;
    c.U = 1;
    const SpCaseResult expected = run_sp_case(c);
    CHECK(bitwise_equal(hybrid, expected));
    CHECK(hybrid.total_forward == expected.total_forward);
    CHECK(hybrid.total_backward == expected.total_backward);
  };
  for (int C : wf::comm::valid_team_sizes(P)) {
    if (C <= 2) same_as(hybrid_case({1, C}, true, true, 2, DType::f64), SpStrategy::wallfacer);
  }
  for (bool causal : {true, false}) {
    // P | h = 2P; the kv heads replicated on every rank (causal) or split over them (full).
    SpCase c = hybrid_case({P, 1}, true, causal, causal ? 1 : P, DType::f64);
    c.h = 2 * P;
    same_as(c, SpStrategy::ulysses);
  }
}

TEST_CASE("ulysses-wallfacer moves bf16 activations with fp32 statistics, within bf16 tolerance",
          "[dist][sp][ulysses_wallfacer][bf16]") {
  // The all-to-alls move Q, K, V, O and their gradients in bf16 and lse, d_lse in f32; WallFacer
  // inside moves bf16 with f32 partial sums (the default ElementBytes of a bf16 case). h_kv = 2:
  // split over U = 2, replicated at U = 4 (its dK, dV summed over the sharers in f32).
  for (const HybridLayout& l : hybrid_layouts()) {
    for (bool inner : {true, false}) {
      const SpCaseResult r = run_sp_case(hybrid_case(l, inner, true, 2, DType::bf16));
      REQUIRE(r.o.dtype() == DType::bf16);
    }
  }
}
