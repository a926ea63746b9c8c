// WallFacer multi-ring attention (src/parallel/wallfacer_attention.cpp) with the whole world as
// one sp group, for every team size C the world allows (C = 1 always, C = 2 at P = 4 and 8).
//
// Most cases go through the shared run_sp_case (sp_testing.h): output, lse and dQ, dK, dV
// against naive f64 attention, the traffic counters against traffic_model.h per rank and
// summed, and every rank's attention work. What that helper does not cover is run here on
// this rank's shard (run_local): the p2p-intra placement, a softmax scale that makes the logits
// huge, bf16 activations with fp32 statistics and partial sums, and the backward's work.
// Sizes are tiny (N = 6·P zigzag, 5·P contiguous, d = 8): about a second per world size.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/attention_testing.h"
#include "sp_testing.h"
#include "src/parallel/wallfacer_attention.h"
#include "wallfacer/autograd/engine.h"

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

// ---- cases -----------------------------------------------------------------------------------

// C = 1 everywhere, and C = 2 where C² divides the world size (larger C needs P = 16).
std::vector<int> team_sizes() {
  std::vector<int> out;
  for (int C : wf::comm::valid_team_sizes(runtime().world_size())) {
    if (C <= 2) out.push_back(C);
  }
  return out;
}

SpCase wallfacer_case(int C, bool causal, std::int64_t B, std::int64_t h_kv, DType dtype) {
  SpCase c;
  c.strategy = SpStrategy::wallfacer;
  c.C = C;
  c.causal = causal;
  c.B = B;
  c.h = 4;
  c.h_kv = h_kv;
  c.d = 8;
  c.dtype = dtype;
  const int P = runtime().world_size();
  c.N = c.layout_or_default() == SequenceLayout::zigzag ? 6 * P : 5 * P;  // never a power of two
  return c;
}

std::string describe(const SpCase& c, Placement placement, double scale) {
  return fmt::format("wallfacer P = {} C = {} {} {} B = {} h = {} h_kv = {} d = {} N = {} {} {} scale {}",
                     runtime().world_size(), c.C, wf::comm::placement_name(placement), c.causal ? "causal" : "full",
                     c.B, c.h, c.h_kv, c.d, c.N, wf::dtype_name(c.dtype),
                     c.keep_forward_kv ? "keep-forward-kv" : "redispatch", scale);
}

void print_on_rank0(const std::string& line) {
  if (runtime().rank() == 0) fmt::print("{}\n", line);
}

// Largest error of each output over a set of cases.
struct WorstErrors {
  std::array<double, 5> e{};  // o, lse, dq, dk, dv
  void add(const std::array<double, 5>& errors) {
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = std::max(e[i], errors[i]);
  }
  std::string str() const {
    return fmt::format("out {:.1e} lse {:.1e} dq {:.1e} dk {:.1e} dv {:.1e}", e[0], e[1], e[2], e[3], e[4]);
  }
};

// ---- what run_sp_case does not cover: placement, scale, bf16, backward work ------------------

constexpr const char* kSpGroups[] = {"sp", "sp.team", "sp.ring"};

SpTraffic sp_traffic(wf::comm::CommGrid& grid) {
  SpTraffic t;
  for (const char* name : kSpGroups) {
    const wf::comm::TrafficCounters& counters = grid.group(name).traffic();
    t.p2p_sent += counters.p2p().bytes_sent;
    t.p2p_received += counters.p2p().bytes_received;
    t.collective_sent += counters.collectives().bytes_sent;
    t.collective_received += counters.collectives().bytes_received;
  }
  return t;
}

void reset_sp_traffic(wf::comm::CommGrid& grid) {
  for (const char* name : kSpGroups) grid.group(name).traffic().reset();
}

SpTraffic sum_over_sp(wf::comm::CommGrid& grid, const SpTraffic& mine) {
  wf::comm::Group& sp = grid.group("sp");
  const wf::comm::Traffic p2p = wf::comm::sum_over_ranks(sp, {0, mine.p2p_sent, 0, mine.p2p_received});
  const wf::comm::Traffic coll = wf::comm::sum_over_ranks(sp, {0, mine.collective_sent, 0, mine.collective_received});
  return {p2p.bytes_sent, p2p.bytes_received, coll.bytes_sent, coll.bytes_received};
}

struct LocalRun {
  std::array<double, 5> errors{};  // o, lse, dq, dk, dv: the largest over the world
  BlockAttentionStats forward_work, backward_work;
};

// One forward and backward through the case's strategy (WallFacer, or ring) on `placement`'s
// grid, checked on this rank's shard: values against `ref` = sp_reference(c, scale) (within
// `tolerance`), traffic against the model per rank and summed, forward work against the layout's
// prediction.
LocalRun run_local(const SpCase& c, Placement placement, double scale, double tolerance,
                   const ReferenceAttention& ref) {
  const int P = runtime().world_size();
  INFO(describe(c, placement, scale));
  wf::comm::CommGrid& grid = sp_grid(c.C, placement);
  const wf::parallel::SpAttentionConfig config{c.strategy, c.layout_or_default(), c.N, c.keep_forward_kv};
  const wf::parallel::SpShard shard = wf::parallel::sp_shard(config, grid);
  const std::vector<std::int64_t> positions = wf::parallel::run_positions(shard.runs());
  const std::shared_ptr<wf::nn::AttentionStrategy> strategy = wf::parallel::make_sp_attention(config, grid);

  Tensor q = shard.shard(ref.q), k = shard.shard(ref.k), v = shard.shard(ref.v);
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  reset_sp_traffic(grid);
  const wf::AttentionResult out = strategy->forward(q, k, v, {.causal = c.causal, .scale = scale});
  const SpTraffic forward = sp_traffic(grid);
  reset_sp_traffic(grid);
  wf::autograd::backward({out.out, out.lse}, {shard.shard(ref.d_o), take_positions(ref.d_lse, 2, positions)});
  const SpTraffic backward = sp_traffic(grid);

  LocalRun run;
  const std::vector<double> e = max_over_world(
      {relative_error(out.out, shard.shard(ref.o)), relative_error(out.lse, take_positions(ref.lse, 2, positions)),
       relative_error(q.grad(), shard.shard(ref.dq)), relative_error(k.grad(), shard.shard(ref.dk)),
       relative_error(v.grad(), shard.shard(ref.dv))});
  std::copy(e.begin(), e.end(), run.errors.begin());
  INFO("relative errors (max over ranks): out " << e[0] << ", lse " << e[1] << ", dq " << e[2] << ", dk " << e[3]
                                                << ", dv " << e[4] << "; tolerance " << tolerance);
  for (double error : e) CHECK(error <= tolerance);  // a NaN or Inf anywhere is an infinite error

  const int l = shard.logical_index;
  CHECK(forward == expected_sp_traffic(c, P, l, Pass::forward));
  CHECK(backward == expected_sp_traffic(c, P, l, Pass::backward));
  CHECK(sum_over_sp(grid, forward) == expected_sp_traffic_total(c, P, Pass::forward));
  CHECK(sum_over_sp(grid, backward) == expected_sp_traffic_total(c, P, Pass::backward));

  const auto& work = dynamic_cast<const wf::parallel::SpAttentionWork&>(*strategy);
  run.forward_work = work.last_forward_work();
  run.backward_work = work.last_backward_work();
  if (c.strategy == SpStrategy::wallfacer) {
    CHECK(run.forward_work.unmasked_pairs ==
          wf::parallel::wallfacer_rank_work_pairs(c.layout_or_default(), c.N, P, c.C, l, c.causal));
  }
  return run;
}

}  // namespace

TEST_CASE("wallfacer attention equals single-process attention, with the modelled traffic and work",
          "[dist][sp][wallfacer]") {
  const int P = runtime().world_size();
  for (int C : team_sizes()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      WorstErrors worst;
      int k = 0;
      for (bool causal : {true, false}) {
        for (std::int64_t h_kv : {4, 2, 1}) {  // MHA, GQA, MQA
          if (dtype == DType::f32 && h_kv == 2) continue;
          // Batch and the backward K/V setting alternate: in f64 both settings and both batches
          // meet both masks.
          SpCase c = wallfacer_case(C, causal, 1 + (k / 2) % 2, h_kv, dtype);
          c.keep_forward_kv = k % 2 == 0;
          c.lse_grad = k != 2;  // once, a loss of O alone
          c.seed = 100 + static_cast<std::uint64_t>(k++);
          const SpCaseResult r = run_sp_case(c);
          worst.add({r.error_o, r.error_lse, r.error_dq, r.error_dk, r.error_dv});
        }
      }
      print_on_rank0(
          fmt::format("wallfacer P = {} C = {} {}: max relative error {}", P, C, wf::dtype_name(dtype), worst.str()));
    }
  }
}

TEST_CASE("wallfacer attention under the p2p-intra placement", "[dist][sp][wallfacer]") {
  const int P = runtime().world_size();
  for (int C : team_sizes()) {
    WorstErrors worst;
    int k = 0;
    for (bool causal : {true, false}) {
      for (std::int64_t h_kv : {4, 1}) {
        SpCase c = wallfacer_case(C, causal, 1 + k % 2, h_kv, DType::f64);
        c.keep_forward_kv = k / 2 == 0;
        c.seed = 200 + static_cast<std::uint64_t>(k++);
        worst.add(run_local(c, Placement::p2p_intra, 0.0, sp_tolerance(c.dtype), sp_reference(c, 0.0)).errors);
      }
    }
    print_on_rank0(fmt::format("wallfacer P = {} C = {} p2p-intra f64: max relative error {}", P, C, worst.str()));
  }
}

TEST_CASE("wallfacer attention: at P = 8, C = 2 the forward P2P bytes are half of ring attention's",
          "[dist][sp][wallfacer]") {
  const int P = runtime().world_size();
  for (int C : team_sizes()) {
    SpCase c = wallfacer_case(C, true, 1, 2, DType::f32);
    const SpCaseResult r = run_sp_case(c);
    const std::int64_t ring =
        wf::parallel::ring_attention_traffic_total({c.B, c.N, c.h, c.h_kv, c.d}, P, Pass::forward, c.bytes_or_default())
            .p2p_sent;
    print_on_rank0(fmt::format(
        "wallfacer P = {} C = {}: forward P2P bytes summed over ranks {} vs ring attention {} "
        "(ratio {:.4f}); team collectives {}; backward P2P {}, collectives {}",
        P, C, r.total_forward.p2p_sent, ring, ring == 0 ? 0.0 : double(r.total_forward.p2p_sent) / double(ring),
        r.total_forward.collective_sent, r.total_backward.p2p_sent, r.total_backward.collective_sent));
    if (C == 1) CHECK(r.total_forward.p2p_sent == ring);
    if (P == 8 && C == 2) CHECK(2 * r.total_forward.p2p_sent == ring);
  }
}

TEST_CASE("wallfacer attention: lse gaps beyond 100, and query rows a member's keys never reach",
          "[dist][sp][wallfacer]") {
  // Scale 40 spreads one row's logits over hundreds, so the partial lse of the ring steps and
  // of the team members differ by far more than f32's exp range. Under the causal zigzag
  // layout some members' keys all lie in the future of some of the team's queries: those rows'
  // partial lse is −inf and must drop out of the team combine without a NaN.
  for (int C : team_sizes()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      SpCase c = wallfacer_case(C, true, 2, 2, dtype);
      c.seed = 300;
      constexpr double kScale = 40.0;
      const ReferenceAttention ref = sp_reference(c, kScale);
      const std::vector<double> lse = ref.lse.to_vector<double>();
      const auto [lo, hi] = std::minmax_element(lse.begin(), lse.end());
      CHECK(*hi - *lo > 100.0);
      // An f32 lse near 300 is only known to half an ulp (2e-5), and exp(s − lse) turns that into
      // the same relative error on every probability; the ring steps' merges and the team
      // combine round lse a few more times than one kernel does. So f32 gets a few ulps of the
      // largest |lse| on top of its usual tolerance (f64's stays far below its own).
      const double ulps = 4 * std::max(std::abs(*lo), std::abs(*hi)) * 0x1p-23;
      run_local(c, Placement::collectives_intra, kScale, sp_tolerance(dtype) + (dtype == DType::f32 ? ulps : 0.0), ref);
    }
  }
}

TEST_CASE("wallfacer attention: equal work on every rank under the causal zigzag layout, forward and backward",
          "[dist][sp][wallfacer]") {
  const int P = runtime().world_size();
  for (int C : team_sizes()) {
    const SpCase c = wallfacer_case(C, true, 1, 2, DType::f32);
    const LocalRun run = run_local(c, Placement::collectives_intra, 0.0, sp_tolerance(c.dtype), sp_reference(c, 0.0));
    // Each of the G team pairs a rank meets costs 2·S² visible pairs (S = N/2T tokens per chunk);
    // a pair of a team with itself adds the S diagonal pairs. Exactly one member of each team
    // meets its own team's K/V (forward), and a K/V holder meets its own team's queries at most
    // once (backward): equal up to S in 2·S²·G.
    const std::int64_t S = c.N / (2 * (P / C)), G = P / (C * C);
    const std::int64_t fwd = run.forward_work.unmasked_pairs, bwd = run.backward_work.unmasked_pairs;
    INFO("C = " << C << ": forward pairs " << fwd << ", backward pairs " << bwd << ", S = " << S << ", G = " << G);
    CHECK((fwd == 2 * S * S * G || fwd == 2 * S * S * G + S));
    CHECK((bwd == 2 * S * S * G || bwd == 2 * S * S * G + S));
    const std::vector<double> spread = max_over_world({double(fwd), -double(fwd), double(bwd), -double(bwd)});
    CHECK(spread[0] + spread[1] <= double(S));
    CHECK(spread[2] + spread[3] <= double(S));
  }
}

TEST_CASE("wallfacer attention is deterministic, and keeping or re-dispatching K/V changes no bit",
          "[dist][sp][wallfacer]") {
  for (int C : team_sizes()) {
    for (bool causal : {true, false}) {
      SpCase c = wallfacer_case(C, causal, 2, 2, DType::f32);
      const SpCaseResult first = run_sp_case(c), again = run_sp_case(c);
      c.keep_forward_kv = false;
      const SpCaseResult redispatched = run_sp_case(c);
      INFO(describe(c, Placement::collectives_intra, 0.0));
      CHECK(bitwise_equal(first, again));
      CHECK(bitwise_equal(first, redispatched));
    }
  }
}

TEST_CASE("wallfacer attention with C = 1 is ring attention", "[dist][sp][wallfacer]") {
  for (bool causal : {true, false}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      SpCase c = wallfacer_case(1, causal, 2, 2, dtype);
      const SpCaseResult wallfacer = run_sp_case(c);
      c.strategy = SpStrategy::ring;
      const SpCaseResult ring = run_sp_case(c);
      INFO(describe(c, Placement::collectives_intra, 0.0));
      // The same K/V blocks merged in the same order over G = P steps: the forward is ring
      // attention's bit for bit, and so is its traffic. The backward adds the same gradient
      // contributions in another order (the query bundle travels instead of K/V).
      CHECK(mismatch(wallfacer.o, ring.o).empty());
      CHECK(mismatch(wallfacer.lse, ring.lse).empty());
      CHECK(wallfacer.total_forward == ring.total_forward);
      CHECK(wallfacer.forward_pairs == ring.forward_pairs);
      const double tolerance = dtype == DType::f64 ? 1e-13 : 1e-6;
      CHECK(relative_error(wallfacer.dq, ring.dq) <= tolerance);
      CHECK(relative_error(wallfacer.dk, ring.dk) <= tolerance);
      CHECK(relative_error(wallfacer.dv, ring.dv) <= tolerance);
    }
  }
}

TEST_CASE("wallfacer and ring attention move bf16 activations with fp32 statistics and partial sums",
          "[dist][sp][wallfacer][bf16]") {
  std::vector<std::pair<SpStrategy, int>> strategies = {{SpStrategy::ring, 1}};
  for (int C : team_sizes()) strategies.emplace_back(SpStrategy::wallfacer, C);
  for (const auto& [strategy, C] : strategies) {
    SpCase c = wallfacer_case(C, true, 1, 2, DType::bf16);
    c.strategy = strategy;  // ring: K, V travel bf16, the dK, dV accumulators f32
    c.keep_forward_kv = false;
    run_local(c, Placement::collectives_intra, 0.0, sp_tolerance(c.dtype), sp_reference(c, 0.0));
  }
}

TEST_CASE("wallfacer attention rejects bad calls with errors that name the problem", "[dist][sp][wallfacer]") {
  const int P = runtime().world_size();
  wf::comm::CommGrid& grid = sp_grid(1);
  wf::parallel::SpAttentionConfig config{SpStrategy::wallfacer, SequenceLayout::zigzag, 2 * P + 1, true};
  CHECK_THAT(error_of([&] { wf::parallel::make_wallfacer_attention(config, grid); }),
             Catch::Contains("zigzag sequence layout") && Catch::Contains(fmt::format("N = {}", 2 * P + 1)));
  config.seq_len = 4 * P;
  const auto strategy = wf::parallel::make_wallfacer_attention(config, grid);
  CHECK(strategy->name() == "wallfacer");
  const Tensor q = Tensor::zeros({1, 4, 4, 8}), kv = Tensor::zeros({1, 4, 2, 8});
  wf::AttentionOptions offset;
  offset.q_offset = 4;
  CHECK_THAT(error_of([&] { strategy->forward(q, kv, kv, offset); }),
             Catch::Contains("q_offset and kv_offset must be 0"));
  CHECK_THAT(error_of([&] {
               strategy->forward(Tensor::zeros({1, 3, 4, 8}), kv, kv, {});
             }),
             Catch::Contains("N/P = 4") && Catch::Contains("[1, 3, 4, 8]"));
  const Tensor three_heads = Tensor::zeros({1, 4, 3, 8});
  CHECK_THAT(error_of([&] { strategy->forward(q, three_heads, three_heads, {}); }), Catch::Contains("h_kv dividing h"));
  CHECK_THAT(error_of([&] { strategy->forward(q, kv.to(DType::f64), kv, {}); }),
             Catch::Contains("share one floating dtype"));
}
