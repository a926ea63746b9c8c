// Sequence-parallel attention strategies under mpirun (sp = world size): every case goes
// through run_sp_case (sp_testing.h), which checks results, gradients, traffic and work against
// the f64 reference and the models. WallFacer cases call the same helper.
//
// Sizes stay tiny (N = 5·P or 6·P tokens, d ≤ 8): the whole file runs in about a second per
// world size. Lengths are never powers of two: contiguous N = 5·P, zigzag N = 6·P (3 tokens
// per chunk at C = 1).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/attention_testing.h"
#include "sp_testing.h"
#include "wallfacer/comm/process_grid.h"
#include "wallfacer/parallel/ulysses_heads.h"

using wf::DType;
using wf::parallel::SequenceLayout;
using wf::parallel::SpStrategy;
using namespace wf::test;

namespace {

constexpr DType kFloatTypes[] = {DType::f64, DType::f32};

std::int64_t test_length(SequenceLayout layout, int P) {
  return layout == SequenceLayout::zigzag ? 6 * P : 5 * P;
}

// (h, h_kv) pairs: MHA, GQA and MQA with h = 4; Ulysses keeps those its head rule allows at this
// P and adds head counts that P divides, with kv heads scattered (h_kv = P) and replicated
// (h_kv = 2 and 1 below P), so every world size tests it.
std::vector<std::pair<std::int64_t, std::int64_t>> head_configs(SpStrategy strategy, int P) {
  std::vector<std::pair<std::int64_t, std::int64_t>> all{{4, 4}, {4, 2}, {4, 1}};
  if (strategy != SpStrategy::ulysses) return all;
  all.insert(all.end(), {{2 * P, P}, {P, P}, {2 * P, 2}, {2 * P, 1}});
  std::vector<std::pair<std::int64_t, std::int64_t>> valid;
  for (const auto& [h, h_kv] : all) {
    if (wf::parallel::ulysses_heads_problem(h, h_kv, P).empty() &&
        std::find(valid.begin(), valid.end(), std::pair{h, h_kv}) == valid.end()) {
      valid.push_back({h, h_kv});
    }
  }
  return valid;
}

SpCase make_case(SpStrategy strategy, bool causal, std::int64_t B, std::int64_t h, std::int64_t h_kv, DType dtype) {
  SpCase c;
  c.strategy = strategy;
  c.causal = causal;
  c.B = B;
  c.h = h;
  c.h_kv = h_kv;
  c.d = B == 1 ? 8 : 4;
  c.dtype = dtype;
  c.N = test_length(c.layout_or_default(), runtime().world_size());
  return c;
}

void print_on_rank0(const std::string& line) {
  if (runtime().rank() == 0) fmt::print("{}\n", line);
}

}  // namespace

TEST_CASE("ring and ulysses attention equal single-process attention, with the modelled traffic and work",
          "[dist][sp]") {
  const int P = runtime().world_size();
  for (DType dtype : kFloatTypes) {
    for (SpStrategy strategy : {SpStrategy::ring, SpStrategy::ulysses}) {
      std::map<std::string, double> worst;  // by output
      for (bool causal : {true, false}) {
        for (const auto& [h, h_kv] : head_configs(strategy, P)) {
          for (std::int64_t B : {1, 2}) {
            const SpCase c = make_case(strategy, causal, B, h, h_kv, dtype);
            const SpCaseResult r = run_sp_case(c);
            worst["out"] = std::max(worst["out"], r.error_o);
            worst["lse"] = std::max(worst["lse"], r.error_lse);
            worst["dq"] = std::max(worst["dq"], r.error_dq);
            worst["dk"] = std::max(worst["dk"], r.error_dk);
            worst["dv"] = std::max(worst["dv"], r.error_dv);
            if (causal) {  // zigzag: every rank computes the same number of visible pairs
              REQUIRE(r.forward_pairs.size() == static_cast<std::size_t>(P));
              CHECK(std::all_of(r.forward_pairs.begin(), r.forward_pairs.end(),
                                [&](std::int64_t p) { return p == r.forward_pairs[0]; }));
            }
          }
        }
      }
      print_on_rank0(fmt::format("sp {:8} P = {} {}: max relative error out {:.1e} lse {:.1e} dq {:.1e} dk {:.1e} "
                                 "dv {:.1e}",
                                 wf::parallel::sp_strategy_name(strategy), P, wf::dtype_name(dtype), worst["out"],
                                 worst["lse"], worst["dq"], worst["dk"], worst["dv"]));
    }
  }
}

TEST_CASE("ring and ulysses work with either layout under either mask, and on grids with teams", "[dist][sp]") {
  const int P = runtime().world_size();
  for (SpStrategy strategy : {SpStrategy::ring, SpStrategy::ulysses}) {
    for (bool causal : {true, false}) {
      // The other layout: causal over contiguous (unbalanced), full over zigzag.
      SpCase c = make_case(strategy, causal, 2, P, P, DType::f64);
      c.layout = causal ? SequenceLayout::contiguous : SequenceLayout::zigzag;
      c.N = test_length(*c.layout, P);
      run_sp_case(c);
      if (strategy != SpStrategy::ulysses) continue;
      for (std::int64_t h_kv : {1, 2}) {  // Ulysses with kv heads replicated: h_kv < P, dividing P
        if (h_kv >= P || P % h_kv != 0) continue;
        c.h = 2 * P;
        c.h_kv = h_kv;
        run_sp_case(c);
      }
    }
  }
  // Ring and Ulysses use the whole sp group whatever team size the grid has.
  for (int C : wf::comm::valid_team_sizes(P)) {
    if (C == 1) continue;
    SpCase c = make_case(SpStrategy::ring, true, 1, 4, 2, DType::f64);
    c.C = C;
    run_sp_case(c);
    c.strategy = SpStrategy::ulysses;
    c.h = c.h_kv = P;
    run_sp_case(c);
  }
}

TEST_CASE("the same global input gives the same results under every strategy, and reruns are bit-identical",
          "[dist][sp]") {
  const int P = runtime().world_size();
  // h_kv = 1: Ulysses replicates the kv head on every rank and sums its dK, dV over them.
  for (const std::int64_t h_kv : {std::int64_t{P}, std::int64_t{1}}) {
    for (DType dtype : kFloatTypes) {
      for (bool causal : {true, false}) {
        const SpCase ring = make_case(SpStrategy::ring, causal, 2, 2 * P, h_kv, dtype);
        SpCase ulysses = ring;
        ulysses.strategy = SpStrategy::ulysses;
        const SpCaseResult a = run_sp_case(ring), b = run_sp_case(ulysses);
        const double tolerance = sp_tolerance(dtype);
        CHECK(relative_error(a.o, b.o) <= tolerance);
        CHECK(relative_error(a.lse, b.lse) <= tolerance);
        CHECK(relative_error(a.dq, b.dq) <= tolerance);
        CHECK(relative_error(a.dk, b.dk) <= tolerance);
        CHECK(relative_error(a.dv, b.dv) <= tolerance);
        CHECK(bitwise_equal(a, run_sp_case(ring)));
        CHECK(bitwise_equal(b, run_sp_case(ulysses)));
        for (int C : wf::comm::valid_team_sizes(P)) {  // WallFacer with every team size the world allows
          SpCase wallfacer = ring;
          wallfacer.strategy = SpStrategy::wallfacer;
          wallfacer.C = C;
          const SpCaseResult w = run_sp_case(wallfacer);
          INFO("wallfacer C = " << C);
          CHECK(relative_error(w.o, a.o) <= tolerance);
          CHECK(relative_error(w.lse, a.lse) <= tolerance);
          CHECK(relative_error(w.dq, a.dq) <= tolerance);
          CHECK(relative_error(w.dk, a.dk) <= tolerance);
          CHECK(relative_error(w.dv, a.dv) <= tolerance);
        }
      }
    }
  }
}

// bf16 mixed precision: Q, K, V, O and their gradients travel in bf16 (half an f32 copy's bytes),
// lse, d_lse and ring's dK, dV accumulators in f32 (the default ElementBytes of a bf16 case, the
// rule of train::sp_element_bytes). Ulysses multiplies bf16 natively where the CPU can, else
// widens while unpacking; a kv head replicated over its sharers (h_kv < P) has its gradient
// summed in f32. Against the f64 reference on the rounded inputs at sp_tolerance(bf16).
TEST_CASE("ring and ulysses move bf16 activations with fp32 statistics, within bf16 tolerance", "[dist][sp][bf16]") {
  const int P = runtime().world_size();
  for (SpStrategy strategy : {SpStrategy::ring, SpStrategy::ulysses}) {
    for (bool causal : {true, false}) {
      for (const std::int64_t h_kv : {std::int64_t{P}, std::int64_t{1}}) {
        SpCase c = make_case(strategy, causal, 2, 2 * P, h_kv, DType::bf16);
        c.seed = 41;
        const SpCaseResult r = run_sp_case(c);
        REQUIRE(r.o.dtype() == DType::bf16);
      }
    }
  }
}

TEST_CASE("sp traffic summed over ranks, per strategy (printed)", "[dist][sp]") {
  const int P = runtime().world_size();
  SpCase ring = make_case(SpStrategy::ring, true, 1, 2 * P, P, DType::f32);
  SpCase ulysses = ring;
  ulysses.strategy = SpStrategy::ulysses;
  const SpCaseResult r = run_sp_case(ring), u = run_sp_case(ulysses);
  const auto ratio = [](std::int64_t a, std::int64_t b) { return b == 0 ? 0.0 : double(a) / double(b); };
  print_on_rank0(fmt::format(
      "sp traffic P = {} (B = 1, N = {}, h = {}, h_kv = {}, d = {}, f32), bytes sent summed over ranks:\n"
      "  ring     forward p2p {:7}  backward p2p {:7}\n"
      "  ulysses  forward collectives {:7}  backward collectives {:7}  (lse share {:.3f})\n"
      "  ulysses / ring: forward {:.3f}  backward {:.3f}",
      P, ring.N, ring.h, ring.h_kv, ring.d, r.total_forward.p2p_sent, r.total_backward.p2p_sent,
      u.total_forward.collective_sent, u.total_backward.collective_sent,
      // The lse all-to-all's part of ulysses_traffic: (P−1)·(R·s/P) per rank, R = (N/P)·h.
      ratio(P * (P - 1) * ((ring.N / P) * ring.h * ring.bytes_or_default().stats / P),
            u.total_forward.collective_sent),
      ratio(u.total_forward.collective_sent, r.total_forward.p2p_sent),
      ratio(u.total_backward.collective_sent, r.total_backward.p2p_sent)));
  // MQA: ring's K/V shrink to one head, while Ulysses sends that head to every rank.
  ring.h_kv = ulysses.h_kv = 1;
  const SpCaseResult r1 = run_sp_case(ring), u1 = run_sp_case(ulysses);
  print_on_rank0(fmt::format("  h_kv = 1: ring forward p2p {:7}  backward p2p {:7}; ulysses forward collectives {:7}  "
                             "backward collectives {:7}; ulysses / ring: forward {:.3f}  backward {:.3f}",
                             r1.total_forward.p2p_sent, r1.total_backward.p2p_sent, u1.total_forward.collective_sent,
                             u1.total_backward.collective_sent,
                             ratio(u1.total_forward.collective_sent, r1.total_forward.p2p_sent),
                             ratio(u1.total_backward.collective_sent, r1.total_backward.p2p_sent)));
}

TEST_CASE("ulysses rejects head counts its rule does not allow, naming the ones that work, on every rank alike",
          "[dist][sp]") {
  const int P = runtime().world_size();
  if (P == 1) return;  // every head count splits over 1
  wf::comm::CommGrid& grid = sp_grid(1);
  const wf::parallel::SpAttentionConfig config{SpStrategy::ulysses, SequenceLayout::zigzag, 6 * P, true};
  const auto strategy = wf::parallel::make_sp_attention(config, grid);
  struct Bad {
    std::int64_t h, h_kv;
    const char* kv_heads_that_work;  // the start of the message's list at this P
  };
  std::vector<Bad> bad{{P + 1, 1, "none"}};               // P does not divide h
  bad.push_back({P * (P + 1), P + 1, "1, "});            // h_kv > P, not a multiple of P
  if (P >= 3) bad.push_back({P * (P - 1), P - 1, "1, "});  // h_kv < P, not dividing P
  for (const Bad& b : bad) {
    INFO("h = " << b.h << ", h_kv = " << b.h_kv);
    const wf::Tensor q = wf::Tensor::zeros({1, 6, b.h, 4}, DType::f64);
    const wf::Tensor k = wf::Tensor::zeros({1, 6, b.h_kv, 4}, DType::f64);
    wf::comm::TrafficRegistry::instance().reset();
    const std::string error = error_of([&] { strategy->forward(q, k, k, {}); });
    CHECK_THAT(error, Catch::Contains(fmt::format("ulysses attention: h = {} query heads and h_kv = {} kv heads do not "
                                                  "split over the sp size P = {}",
                                                  b.h, b.h_kv, P)) &&
                          Catch::Contains("h_kv a multiple of P or a divisor of P") &&
                          Catch::Contains(fmt::format("at P = {}, h_kv can be {}", P, b.kv_heads_that_work)) &&
                          Catch::Contains("use ring or wallfacer attention"));
    CHECK(grid.group("sp").traffic().total() == wf::comm::Traffic{});  // nothing was sent before the check
  }
}

TEST_CASE("sp strategies: names, shards and configuration errors", "[dist][sp]") {
  const int P = runtime().world_size();
  for (SpStrategy s : {SpStrategy::ring, SpStrategy::ulysses, SpStrategy::wallfacer}) {
    CHECK(wf::parallel::parse_sp_strategy(wf::parallel::sp_strategy_name(s)) == s);
  }
  CHECK_THAT(error_of([] { wf::parallel::parse_sp_strategy("megatron"); }),
             Catch::Contains("'megatron'") && Catch::Contains("ring, ulysses, wallfacer"));

  wf::comm::CommGrid& grid = sp_grid(1);
  for (SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    const wf::parallel::SpAttentionConfig config{SpStrategy::ring, layout, 6 * P, true};
    const wf::parallel::SpShard shard = wf::parallel::sp_shard(config, grid);
    CHECK(shard.P == P);
    CHECK(shard.C == 1);
    CHECK(shard.logical_index == runtime().rank());
    CHECK(shard.runs() == wf::parallel::rank_tokens(layout, 6 * P, P, 1, runtime().rank()));
  }
  for (SpStrategy s : {SpStrategy::ring, SpStrategy::ulysses}) {
    const wf::parallel::SpAttentionConfig bad{s, SequenceLayout::zigzag, 2 * P + 1, true};
    CHECK_THAT(error_of([&] { wf::parallel::make_sp_attention(bad, grid); }),
               Catch::Contains("zigzag sequence layout") && Catch::Contains(fmt::format("N = {}", 2 * P + 1)));
  }
  // A shard of the wrong length is named with the expected one.
  const wf::parallel::SpAttentionConfig config{SpStrategy::ring, SequenceLayout::zigzag, 6 * P, true};
  const auto ring = wf::parallel::make_sp_attention(config, grid);
  const wf::Tensor q = wf::Tensor::zeros({1, 5, 4, 4}, DType::f64);
  CHECK_THAT(error_of([&] { ring->forward(q, q, q, {}); }),
             Catch::Contains("N/P = ") && Catch::Contains("[1, 5, 4, 4]"));
  wf::AttentionOptions offset;
  offset.q_offset = 3;
  const wf::Tensor ok = wf::Tensor::zeros({1, 6, 4, 4}, DType::f64);
  CHECK_THAT(error_of([&] { ring->forward(ok, ok, ok, offset); }), Catch::Contains("offsets must be 0"));
}
