// AttentionStrategy::replay for ring, Ulysses, WallFacer and ulysses-wallfacer attention (activation checkpointing
// at the attention output): a forward without a graph gives `saved`; replay on fresh leaves
// q, k, v must hand back saved.out and saved.lse, compute no attention and send nothing, and its
// backward must give the gradients of an ordinary forward + backward on the same inputs. All
// three replays are built to reproduce the ordinary backward bit for bit (f64 here), and the
// tests require exactly that; the measured differences are printed.
//
// Cases, at every world size the suite runs: ring (any P), Ulysses (h = 4, h_kv = 2 where its
// head rule allows it, and h = 2P, h_kv = 1: the kv head replicated on every rank), WallFacer
// with C = 1 and C = 2 (C² | P) under both placements, ulysses-wallfacer with every U strictly
// between 1 and P and C ≤ 2 (C² | P/U; U = 2 in both orders); causal zigzag and full contiguous;
// GQA h = 4, h_kv = 2; a loss of O alone and one with a gradient on lse too. With packed
// documents (tagged [sp_documents] too): the backward's rings skip the steps no rank needs
// (document_ring_steps.h), its traffic the replay formula with those hops.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/attention_testing.h"
#include "sp_testing.h"
#include "wallfacer/autograd/engine.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/comm/traffic.h"
#include "wallfacer/parallel/ulysses_heads.h"

using wf::AttentionOptions;
using wf::AttentionResult;
using wf::DType;
using wf::Tensor;
using wf::comm::Placement;
using wf::parallel::BlockAttentionStats;
using wf::parallel::Pass;
using wf::parallel::SequenceLayout;
using wf::parallel::SpStrategy;
using wf::parallel::SpTraffic;
using namespace wf::test;

namespace {

struct ReplayCase {
  SpCase c;
  Placement placement = Placement::collectives_intra;
  // Largest relative difference of dQ, dK, dV from the ordinary backward: 0 (bit for bit) except
  // for bf16, whose replay reads the returned bf16 O and lse (the ordinary backward: fp32 ones).
  double tolerance = 0;
};

std::string describe(const ReplayCase& r) {
  const SpCase& c = r.c;
  return fmt::format("{} P = {} U = {} ({}) C = {} {} {} h = {} h_kv = {} {} lse grad {}",
                     wf::parallel::sp_strategy_name(c.strategy), runtime().world_size(), c.U,
                     c.ulysses_inner ? "inner" : "outer", c.C,
                     wf::comm::placement_name(r.placement),
                     c.causal ? "causal zigzag" : "full contiguous", c.h, c.h_kv, wf::dtype_name(c.dtype), c.lse_grad);
}

// Every case the world allows, each with its own seed.
std::vector<ReplayCase> replay_cases() {
  const int P = runtime().world_size();
  std::vector<ReplayCase> cases;
  const auto add = [&](SpStrategy strategy, int C, Placement placement, std::int64_t h = 4, std::int64_t h_kv = 2,
                       int U = 1, bool ulysses_inner = true) {
    for (bool causal : {true, false}) {
      for (bool lse_grad : {false, true}) {
        ReplayCase r;
        r.c.strategy = strategy;
        r.c.C = C;
        r.c.U = U;
        r.c.ulysses_inner = ulysses_inner;
        r.c.causal = causal;
        r.c.h = h;
        r.c.h_kv = h_kv;
        r.c.d = 8;
        r.c.N = causal ? 6 * P : 5 * P;  // zigzag: 2P chunks (2C·P/C for WallFacer); never a power of two
        r.c.lse_grad = lse_grad;
        r.c.seed = 500 + cases.size();
        r.placement = placement;
        cases.push_back(r);
      }
    }
  };
  add(SpStrategy::ring, 1, Placement::collectives_intra);
  if (wf::parallel::ulysses_heads_problem(4, 2, P).empty()) add(SpStrategy::ulysses, 1, Placement::collectives_intra);
  add(SpStrategy::ulysses, 1, Placement::collectives_intra, 2 * P, 1);
  for (int C : wf::comm::valid_team_sizes(P)) {
    if (C > 2) continue;
    for (Placement placement : {Placement::collectives_intra, Placement::p2p_intra}) {
      add(SpStrategy::wallfacer, C, placement);
    }
  }
  for (int U = 2; U < P; ++U) {
    if (P % U != 0) continue;
    for (int C : wf::comm::valid_team_sizes(P / U)) {
      if (C > 2) continue;
      add(SpStrategy::ulysses_wallfacer, C, Placement::collectives_intra, 4, 2, U);
      if (U == 2) add(SpStrategy::ulysses_wallfacer, C, Placement::p2p_intra, 4, 2, U, /*ulysses_inner=*/false);
    }
  }
  return cases;
}

// What the replay's backward moves on this rank: traffic_model.h's replay formula (ring: its
// ordinary backward; Ulysses: forward + backward; WallFacer: the re-dispatching backward plus q
// in the dO all-gather and lse in the D all-gather).
SpTraffic expected_replay_backward(const SpCase& c, int logical_index) {
  const int P = runtime().world_size();
  return wf::parallel::sp_replay_backward_traffic(c.strategy, {c.B, c.N, c.h, c.h_kv, c.d}, P, c.U, c.C,
                                                  logical_index, c.bytes_or_default(),
                                                  expected_ring_hops(c, P, Pass::backward));
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return std::numeric_limits<double>::infinity();
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;  // also equal infinities (an lse no key reached)
    const double d = std::abs(x[i] - y[i]);
    worst = std::max(worst, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return worst;
}

struct Leaves {
  Tensor q, k, v;
};
Leaves leaves(const wf::parallel::SpShard& shard, const ReferenceAttention& ref) {
  Leaves l{shard.shard(ref.q), shard.shard(ref.k), shard.shard(ref.v)};
  l.q.set_requires_grad();
  l.k.set_requires_grad();
  l.v.set_requires_grad();
  return l;
}

void reset_traffic() { wf::comm::TrafficRegistry::instance().reset(); }

// The largest |replayed − ordinary| over the world, for out, lse, dq, dk and dv, then the
// relative differences of dq, dk and dv.
std::vector<double> run_replay_case(const ReplayCase& r) {
  const SpCase& c = r.c;
  INFO(describe(r));
  wf::comm::CommGrid& grid = sp_grid(c.C, r.placement, c.U, c.ulysses_inner);
  const wf::parallel::SpAttentionConfig config{c.strategy, c.layout_or_default(), c.N, /*keep_forward_kv=*/true};
  const wf::parallel::SpShard shard = wf::parallel::sp_shard(config, grid);
  const std::shared_ptr<wf::nn::AttentionStrategy> strategy = wf::parallel::make_sp_attention(config, grid);
  const auto& work = dynamic_cast<const wf::parallel::SpAttentionWork&>(*strategy);
  // bf16 inputs are drawn in f32 and rounded (the f64 reference results are not used here).
  const ReferenceAttention ref = sp_reference(c);
  const Tensor d_out = shard.shard(ref.d_o);
  const Tensor d_lse = take_positions(ref.d_lse, 2, wf::parallel::run_positions(shard.runs()));
  AttentionOptions options;
  options.causal = c.causal;
  options.doc_bounds = c.doc_bounds;
  const auto backward = [&](const AttentionResult& out) {
    if (c.lse_grad) {
      wf::autograd::backward({out.out, out.lse}, {d_out, d_lse});
    } else {
      wf::autograd::backward({out.out}, {d_out});
    }
  };

  // The ordinary forward and backward.
  const Leaves ordinary = leaves(shard, ref);
  const AttentionResult expected = strategy->forward(ordinary.q, ordinary.k, ordinary.v, options);
  const BlockAttentionStats forward_work = work.last_forward_work();
  backward(expected);
  const BlockAttentionStats backward_work = work.last_backward_work();
  // With documents a rank may hold no pair at all (WallFacer with C > 1: its K/V are another team's).
  if (c.doc_bounds.empty()) CHECK(forward_work.unmasked_pairs > 0);

  // The checkpointed forward: no graph, only the result is kept.
  AttentionResult saved;
  {
    wf::NoGradGuard no_grad;
    saved = strategy->forward(shard.shard(ref.q), shard.shard(ref.k), shard.shard(ref.v), options);
  }
  CHECK(!saved.out.requires_grad());

  // The replay: no attention, no message, saved's values as the outputs of a new node.
  const Leaves replayed = leaves(shard, ref);
  reset_traffic();
  const AttentionResult again = strategy->replay(replayed.q, replayed.k, replayed.v, options, saved);
  const SpTraffic replay_forward = wf::parallel::measured_sp_traffic();
  CHECK(replay_forward == SpTraffic{});
  CHECK(work.last_forward_work() == BlockAttentionStats{});
  CHECK(again.out.requires_grad());
  CHECK(again.lse.requires_grad());
  CHECK(mismatch(again.out, saved.out).empty());
  CHECK(mismatch(again.lse, saved.lse).empty());

  reset_traffic();
  backward(again);
  const SpTraffic replay_backward = wf::parallel::measured_sp_traffic();
  CHECK(work.last_backward_work() == backward_work);
  const SpTraffic expected_traffic = expected_replay_backward(c, shard.logical_index);
  INFO("replay backward traffic: p2p " << replay_backward.p2p_sent << " / " << replay_backward.p2p_received
                                       << ", collectives " << replay_backward.collective_sent << " / "
                                       << replay_backward.collective_received << "; expected p2p "
                                       << expected_traffic.p2p_sent << " / " << expected_traffic.p2p_received
                                       << ", collectives " << expected_traffic.collective_sent << " / "
                                       << expected_traffic.collective_received);
  CHECK(replay_backward == expected_traffic);

  REQUIRE(replayed.q.grad().defined());  // every rank alike: the same cases run everywhere
  REQUIRE(replayed.k.grad().defined());
  REQUIRE(replayed.v.grad().defined());
  const std::pair<Tensor, Tensor> grads[] = {{replayed.q.grad(), ordinary.q.grad()},
                                             {replayed.k.grad(), ordinary.k.grad()},
                                             {replayed.v.grad(), ordinary.v.grad()}};
  std::vector<double> values{max_abs_difference(again.out, expected.out),
                             max_abs_difference(again.lse, expected.lse)};
  for (const auto& [got, want] : grads) values.push_back(max_abs_difference(got, want));
  for (const auto& [got, want] : grads) values.push_back(relative_error(got, want));
  const std::vector<double> worst = max_over_world(values);
  INFO("max |replay − ordinary| over the world: out " << worst[0] << ", lse " << worst[1] << ", dq " << worst[2]
                                                      << ", dk " << worst[3] << ", dv " << worst[4]
                                                      << "; relative dq, dk, dv " << worst[5] << ", " << worst[6]
                                                      << ", " << worst[7]);
  CHECK(worst[0] == 0.0);  // the forward is deterministic: saved is the ordinary result
  CHECK(worst[1] == 0.0);
  for (std::size_t i = 5; i < 8; ++i) CHECK(worst[i] <= r.tolerance);
  return worst;
}

}  // namespace

TEST_CASE("sp attention replay: the saved result, no attention, no message, and the ordinary gradients",
          "[dist][sp][replay]") {
  std::vector<double> worst(5, 0.0);
  const std::vector<ReplayCase> cases = replay_cases();  // f64 only: bit for bit
  for (const ReplayCase& r : cases) {
    const std::vector<double> d = run_replay_case(r);
    for (std::size_t i = 0; i < worst.size(); ++i) worst[i] = std::max(worst[i], d[i]);  // the absolute ones
  }
  if (runtime().rank() == 0) {
    fmt::print("sp replay P = {}: {} cases (ring, ulysses scattered and replicated kv heads, wallfacer C ≤ 2 both "
               "placements, ulysses-wallfacer 1 < U < P), "
               "max |replay − ordinary| out {:.1e} lse {:.1e} dq {:.1e} dk {:.1e} dv {:.1e}\n",
               runtime().world_size(), cases.size(), worst[0], worst[1], worst[2], worst[3], worst[4]);
  }
}

TEST_CASE("sp attention replay with packed documents: the ordinary gradients, the skipping rings' traffic",
          "[dist][sp][replay][sp_documents]") {
  int count = 0;
  for (ReplayCase r : replay_cases()) {
    if (!r.c.causal || !r.c.lse_grad) continue;  // one case per strategy, team size, placement and U
    // Documents of 4 and 2 tokens over zigzag chunks of 3: some cross a chunk boundary, most
    // blocks hold no pair.
    r.c.doc_bounds = {packed(r.c.N, {4, 2})};
    r.c.seed += 200;
    run_replay_case(r);
    ++count;
  }
  CHECK(count > 0);
}

TEST_CASE("sp attention replay rejects a saved result that forward cannot have returned", "[dist][sp][replay]") {
  const int P = runtime().world_size();
  for (SpStrategy strategy : {SpStrategy::ring, SpStrategy::wallfacer}) {
    const wf::parallel::SpAttentionConfig config{strategy, SequenceLayout::zigzag, 4 * P, true};
    const auto attention = wf::parallel::make_sp_attention(config, sp_grid(1));
    const Tensor q = Tensor::zeros({1, 4, 4, 8}), kv = Tensor::zeros({1, 4, 2, 8});
    const AttentionResult wrong_lse{Tensor::zeros({1, 4, 4, 8}), Tensor::zeros({1, 4, 3})};
    CHECK_THAT(error_of([&] { attention->replay(q, kv, kv, {}, wrong_lse); }),
               Catch::Contains("replay: the saved result must be what forward returned") &&
                   Catch::Contains("[1, 4, 4]"));
    CHECK_THAT(error_of([&] { attention->replay(q, kv, kv, {}, AttentionResult{}); }),
               Catch::Contains("must hold out and lse"));
  }
}

TEST_CASE("sp attention replay with bf16 inputs: bf16 traffic, the gradients within bf16 rounding of the ordinary ones",
          "[dist][sp][replay][bf16]") {
  const int P = runtime().world_size();
  for (ReplayCase r : replay_cases()) {
    if (!r.c.causal || !r.c.lse_grad) continue;  // one case per strategy, team size, placement and U
    r.c.dtype = DType::bf16;  // ElementBytes{2, 4, 4}: bf16 activations, f32 statistics and partial sums
    r.c.seed += 100;
    // The replay reads lse rounded to bf16: half an ulp of |lse| ≈ 4 here is about 1e-2, and
    // exp(s − lse) passes it on to every probability (dV too). O rounded to bf16 (2^-9) changes
    // D, and both backwards round their gradients to bf16 at the end. Measured up to 2.0e-2; a
    // replay that got anything wrong would be off by O(1).
    r.tolerance = 5e-2;
    const std::vector<double> d = run_replay_case(r);
    if (runtime().rank() == 0) {
      fmt::print("sp replay P = {} {} bf16: max relative difference from the ordinary backward dq {:.1e} dk {:.1e} "
                 "dv {:.1e}\n",
                 P, describe(r), d[5], d[6], d[7]);
    }
  }
}
