// The traffic formulas against an independent count: the message schedule of each strategy
// simulated step by step with the comm::WallFacerLayout peers (and, for the team collectives,
// as the pairwise exchanges they amount to), adding bytes whenever the peer is another rank.
// Then the consequences wallfacer-algorithm.md states.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/traffic_model.h"
#include "wallfacer/parallel/ulysses_heads.h"

using Catch::Contains;
using wf::comm::Placement;
using wf::comm::WallFacerLayout;
using wf::parallel::AttentionDims;
using wf::parallel::BackwardKv;
using wf::parallel::ElementBytes;
using wf::parallel::Pass;
using wf::parallel::SpTraffic;

namespace {

// Distinct sizes, so a tensor counted at the wrong dtype shows up.
const ElementBytes kBytes{/*activation=*/2, /*stats=*/4, /*partial=*/8};

// Bytes per rank, accumulated message by message. Ranks are physical sp indices.
struct Ledger {
  explicit Ledger(int P) : ranks(static_cast<std::size_t>(P)) {}
  std::vector<SpTraffic> ranks;

  void p2p(int src, int dst, std::int64_t bytes) {
    if (src == dst) return;
    ranks[static_cast<std::size_t>(src)].p2p_sent += bytes;
    ranks[static_cast<std::size_t>(dst)].p2p_received += bytes;
  }
  // One member's piece for another inside a collective.
  void collective(int src, int dst, std::int64_t bytes) {
    if (src == dst) return;
    ranks[static_cast<std::size_t>(src)].collective_sent += bytes;
    ranks[static_cast<std::size_t>(dst)].collective_received += bytes;
  }
  // All-gather, reduce-scatter and all-to-all with equal pieces all come down to every member
  // sending one piece to every other member.
  void exchange(const std::vector<int>& members, std::int64_t piece) {
    for (int a : members) {
      for (int b : members) collective(a, b, piece);
    }
  }
  void all_gather(const std::vector<int>& members, std::int64_t piece) { exchange(members, piece); }
  void reduce_scatter(const std::vector<int>& members, std::int64_t input) {
    exchange(members, input / static_cast<std::int64_t>(members.size()));
  }
};

struct Elements {
  std::int64_t q, kv, rows;  // E, E_kv, R of one local slice
};
Elements elements(const AttentionDims& d, int P) {
  const std::int64_t n = d.seq_len / P;
  return {d.batch * n * d.heads * d.head_dim, d.batch * n * d.kv_heads * d.head_dim, d.batch * n * d.heads};
}

// Steps 0 … count − 1: the whole ring, what an unpacked call runs.
std::vector<int> every_step(int count) {
  std::vector<int> steps;
  for (int s = 0; s < count; ++s) steps.push_back(s);
  return steps;
}

// The sp index `distance` positions on along sp index s's sub-ring.
int ring_ahead(const WallFacerLayout& layout, int s, int distance) {
  wf::comm::SpPosition p = layout.position(s);
  p.ring_pos = ((p.ring_pos + distance) % layout.ring_size() + layout.ring_size()) % layout.ring_size();
  return layout.sp_index(p);
}

std::vector<std::vector<int>> teams_of(const WallFacerLayout& layout) {
  std::vector<std::vector<int>> teams(static_cast<std::size_t>(layout.num_teams()));
  for (int s = 0; s < layout.ranks(); ++s) teams[static_cast<std::size_t>(layout.team(s))].push_back(s);
  return teams;
}

// `steps`: the sub-ring steps run (document_ring_steps.h); from one to the next the K/V (or the
// bundle) hop straight to the rank that runs the next.
Ledger simulate_wallfacer_forward(const WallFacerLayout& layout, const AttentionDims& dims, const ElementBytes& b,
                                  const std::vector<int>& steps) {
  const int C = layout.team_size();
  const Elements e = elements(dims, layout.ranks());
  Ledger ledger(layout.ranks());
  for (const auto& team : teams_of(layout)) {
    ledger.all_gather(team, e.q * b.activation);        // Q
    ledger.all_gather(team, e.kv * b.activation);       // K
    ledger.all_gather(team, e.kv * b.activation);       // V
    ledger.all_gather(team, C * e.rows * b.stats);      // each member's lse over the team's queries
    ledger.reduce_scatter(team, C * e.q * b.partial);   // rescaled partial O
  }
  const std::int64_t team_kv = 2 * C * e.kv * b.activation;
  for (int s = 0; s < layout.ranks(); ++s) ledger.p2p(s, layout.initial_send(s), team_kv);
  for (std::size_t i = 1; i < steps.size(); ++i) {  // no send after the last step
    for (int s = 0; s < layout.ranks(); ++s) ledger.p2p(s, ring_ahead(layout, s, steps[i] - steps[i - 1]), team_kv);
  }
  return ledger;
}

Ledger simulate_wallfacer_backward(const WallFacerLayout& layout, const AttentionDims& dims, const ElementBytes& b,
                                   BackwardKv kv, const std::vector<int>& steps) {
  const int P = layout.ranks(), C = layout.team_size();
  const Elements e = elements(dims, P);
  Ledger ledger(P);
  const auto teams = teams_of(layout);
  for (const auto& team : teams) {
    ledger.all_gather(team, e.q * b.activation);  // dO
    ledger.all_gather(team, e.rows * b.stats);    // D of each member's own rows
  }
  // Where each rank's K/V came from in the dispatch: its dK, dV go back there.
  std::vector<int> kv_origin(static_cast<std::size_t>(P), -1);
  for (int s = 0; s < P; ++s) kv_origin[static_cast<std::size_t>(layout.initial_send(s))] = s;
  if (kv == BackwardKv::redispatch) {
    for (const auto& team : teams) {
      ledger.all_gather(team, e.kv * b.activation);
      ledger.all_gather(team, e.kv * b.activation);
    }
    for (int s = 0; s < P; ++s) ledger.p2p(s, layout.initial_send(s), 2 * C * e.kv * b.activation);
  }
  // Query bundles start at home and move on after every step but the last.
  const std::int64_t bundle = C * (e.q * b.activation + e.q * b.activation + e.rows * b.stats + e.rows * b.stats +
                                   e.q * b.partial);  // Q, dO, lse, D, dQ
  std::vector<int> where(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) where[static_cast<std::size_t>(s)] = s;
  for (std::size_t i = 1; i < steps.size(); ++i) {
    for (int& at : where) {
      const int to = ring_ahead(layout, at, steps[i] - steps[i - 1]);
      ledger.p2p(at, to, bundle);
      at = to;
    }
  }
  for (int home = 0; home < P; ++home) ledger.p2p(where[static_cast<std::size_t>(home)], home, C * e.q * b.partial);
  for (int s = 0; s < P; ++s) ledger.p2p(s, kv_origin[static_cast<std::size_t>(s)], 2 * C * e.kv * b.partial);
  for (const auto& team : teams) {
    ledger.reduce_scatter(team, C * e.q * b.partial);   // dQ
    ledger.reduce_scatter(team, C * e.kv * b.partial);  // dK
    ledger.reduce_scatter(team, C * e.kv * b.partial);  // dV
  }
  return ledger;
}

Ledger simulate_ring(int P, const AttentionDims& dims, const ElementBytes& b, Pass pass,
                     const std::vector<int>& steps) {
  const Elements e = elements(dims, P);
  Ledger ledger(P);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    // On to the rank that holds the block at the next step; after the last, the accumulator home
    // (the block's owner, steps.back() ranks back: ring next when every step ran).
    const int to = i + 1 < steps.size() ? steps[i + 1] - steps[i] : -steps.back();
    for (int r = 0; r < P; ++r) {
      const int dst = ((r + to) % P + P) % P;
      if (i + 1 < steps.size()) ledger.p2p(r, dst, 2 * e.kv * b.activation);  // K, V
      if (pass == Pass::backward) ledger.p2p(r, dst, 2 * e.kv * b.partial);   // dK, dV
    }
  }
  return ledger;
}

// Each rank sends every other rank the slices, over its own tokens, of the heads that rank
// attends with: its h/P query heads (Q, O or dO, dQ) and every kv head those query heads read
// under GQA, query head i reading kv head i / (h/h_kv) (K, V or dK, dV), so a kv head shared by
// several ranks goes to each of them; and the lse (or d_lse) rows of its query heads.
Ledger simulate_ulysses(int P, const AttentionDims& dims, const ElementBytes& b) {
  const std::int64_t n = dims.seq_len / P, head_slice = dims.batch * n * dims.head_dim, q_heads = dims.heads / P;
  Ledger ledger(P);
  for (int dst = 0; dst < P; ++dst) {
    std::set<std::int64_t> kv_heads;
    for (std::int64_t i = dst * q_heads; i < (dst + 1) * q_heads; ++i) {
      kv_heads.insert(i / (dims.heads / dims.kv_heads));
    }
    const auto kv = static_cast<std::int64_t>(kv_heads.size());
    const std::int64_t piece = 2 * q_heads * head_slice * b.activation + 2 * kv * head_slice * b.activation +
                               dims.batch * n * q_heads * b.stats;
    for (int src = 0; src < P; ++src) ledger.collective(src, dst, piece);
  }
  return ledger;
}

SpTraffic sum(const Ledger& ledger) {
  SpTraffic total;
  for (const SpTraffic& t : ledger.ranks) total += t;
  return total;
}

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

constexpr int kWorldSizes[] = {1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 27, 32, 36};

}  // namespace

TEST_CASE("WallFacer traffic equals the simulated schedule, per rank, both placements", "[parallel]") {
  for (int P : kWorldSizes) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      const AttentionDims dims{/*batch=*/2, /*seq_len=*/3 * P, /*heads=*/4, /*kv_heads=*/2, /*head_dim=*/5};
      for (Placement placement : {Placement::collectives_intra, Placement::p2p_intra}) {
        const WallFacerLayout layout(P, C, placement);
        const Ledger forward = simulate_wallfacer_forward(layout, dims, kBytes, every_step(layout.ring_size()));
        for (BackwardKv kv : {BackwardKv::redispatch, BackwardKv::keep_forward}) {
          const Ledger backward = simulate_wallfacer_backward(layout, dims, kBytes, kv, every_step(layout.ring_size()));
          for (int s = 0; s < P; ++s) {
            INFO("P = " << P << ", C = " << C << ", placement " << wf::comm::placement_name(placement)
                        << ", sp index " << s << ", redispatch " << (kv == BackwardKv::redispatch));
            const int l = layout.logical_index(s);
            CHECK(wf::parallel::wallfacer_traffic(dims, P, C, l, Pass::forward, kBytes, kv) ==
                  forward.ranks[static_cast<std::size_t>(s)]);
            CHECK(wf::parallel::wallfacer_traffic(dims, P, C, l, Pass::backward, kBytes, kv) ==
                  backward.ranks[static_cast<std::size_t>(s)]);
          }
          CHECK(wf::parallel::wallfacer_traffic_total(dims, P, C, Pass::backward, kBytes, kv) == sum(backward));
        }
        CHECK(wf::parallel::wallfacer_traffic_total(dims, P, C, Pass::forward, kBytes) == sum(forward));
      }
    }
  }
}

TEST_CASE("ring attention and Ulysses traffic equal their simulated schedules", "[parallel]") {
  for (int P : kWorldSizes) {
    const AttentionDims ring_dims{2, 3 * P, 4, 2, 5};
    for (Pass pass : {Pass::forward, Pass::backward}) {
      INFO("P = " << P << ", backward " << (pass == Pass::backward));
      const Ledger ring = simulate_ring(P, ring_dims, kBytes, pass, every_step(P));
      for (std::size_t r = 0; r < static_cast<std::size_t>(P); ++r) {
        CHECK(wf::parallel::ring_attention_traffic(ring_dims, P, pass, kBytes) == ring.ranks[r]);
      }
      CHECK(wf::parallel::ring_attention_traffic_total(ring_dims, P, pass, kBytes) == sum(ring));
      // Ulysses: kv heads scattered (h_kv = P, 2P) and replicated (every h_kv < P dividing P).
      for (std::int64_t h_kv = 1; h_kv <= 2 * P; ++h_kv) {
        if (h_kv % P != 0 && P % h_kv != 0) continue;
        const AttentionDims ulysses_dims{2, 3 * P, 2 * P, h_kv, 5};
        INFO("ulysses h = " << 2 * P << ", h_kv = " << h_kv);
        const Ledger ulysses = simulate_ulysses(P, ulysses_dims, kBytes);
        for (std::size_t r = 0; r < static_cast<std::size_t>(P); ++r) {
          CHECK(wf::parallel::ulysses_traffic(ulysses_dims, P, pass, kBytes) == ulysses.ranks[r]);
        }
        CHECK(wf::parallel::ulysses_traffic_total(ulysses_dims, P, pass, kBytes) == sum(ulysses));
      }
    }
  }
}

TEST_CASE("packed documents: a ring running some of its steps moves what its hops and home send do",
          "[parallel][ring_steps]") {
  // Every set of steps holding step 0 (document_ring_steps.h) of rings up to 8 steps: the
  // formulas take only the hop count H = steps − 1, whatever the gaps.
  const auto subsets = [](int count) {
    std::vector<std::vector<int>> out;
    for (int mask = 0; mask < (1 << (count - 1)); ++mask) {
      std::vector<int> steps{0};
      for (int s = 1; s < count; ++s) {
        if (mask & (1 << (s - 1))) steps.push_back(s);
      }
      out.push_back(steps);
    }
    return out;
  };
  for (int P : {1, 2, 3, 4, 8}) {
    const AttentionDims dims{2, 3 * P, 4, 2, 5};
    for (const std::vector<int>& steps : subsets(P)) {
      const int H = static_cast<int>(steps.size()) - 1;
      for (Pass pass : {Pass::forward, Pass::backward}) {
        INFO("ring P = " << P << ", " << steps.size() << " steps ending at " << steps.back() << ", backward "
                         << (pass == Pass::backward));
        const Ledger ring = simulate_ring(P, dims, kBytes, pass, steps);
        for (const SpTraffic& rank : ring.ranks) {
          CHECK(wf::parallel::ring_attention_traffic(dims, P, pass, kBytes, H) == rank);
        }
        CHECK(wf::parallel::ring_attention_traffic_total(dims, P, pass, kBytes, H) == sum(ring));
      }
    }
  }
  for (int P : {4, 8, 16, 32}) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      const WallFacerLayout layout(P, C, Placement::collectives_intra);
      if (layout.ring_size() > 8) continue;
      const AttentionDims dims{2, 3 * P, 4, 2, 5};
      for (const std::vector<int>& steps : subsets(layout.ring_size())) {
        const int H = static_cast<int>(steps.size()) - 1;
        const Ledger forward = simulate_wallfacer_forward(layout, dims, kBytes, steps);
        const Ledger backward = simulate_wallfacer_backward(layout, dims, kBytes, BackwardKv::redispatch, steps);
        for (int s = 0; s < P; ++s) {
          INFO("WallFacer P = " << P << ", C = " << C << ", sp index " << s << ", " << steps.size()
                                << " steps ending at " << steps.back());
          const int l = layout.logical_index(s);
          CHECK(wf::parallel::wallfacer_traffic(dims, P, C, l, Pass::forward, kBytes, BackwardKv::redispatch, H) ==
                forward.ranks[static_cast<std::size_t>(s)]);
          CHECK(wf::parallel::wallfacer_traffic(dims, P, C, l, Pass::backward, kBytes, BackwardKv::redispatch, H) ==
                backward.ranks[static_cast<std::size_t>(s)]);
        }
      }
    }
  }
  // kFullRing is the whole ring; a hop count outside the ring is refused.
  const AttentionDims dims{1, 16, 2, 2, 4};
  CHECK(wf::parallel::ring_attention_traffic(dims, 4, Pass::backward, kBytes, wf::parallel::kFullRing) ==
        wf::parallel::ring_attention_traffic(dims, 4, Pass::backward, kBytes, 3));
  CHECK(wf::parallel::ring_attention_traffic(dims, 4, Pass::backward, kBytes, 0) == SpTraffic{});
  CHECK_THAT(error_of([&] { wf::parallel::ring_attention_traffic(dims, 4, Pass::forward, kBytes, 4); }),
             Contains("ring attention of 4 steps makes 0 to 3 hops (or kFullRing), got 4"));
  CHECK_THAT(error_of([&] {
               wf::parallel::wallfacer_traffic(dims, 8, 2, 0, Pass::forward, kBytes, BackwardKv::redispatch, 2);
             }),
             Contains("WallFacer's sub-ring of 2 steps makes 0 to 1 hops"));
}

TEST_CASE("the doc's closed forms: collectives (C-1)(2E + 2E_kv) + lse, P2P 2·C·E_kv·G or ·(G-1)", "[parallel]") {
  // P = 8, C = 2 (G = 2): ranks 0 and 7 dispatch to themselves.
  const AttentionDims dims{2, 32, 4, 2, 8};
  const ElementBytes same{4, 4, 4};
  const std::int64_t E = 2 * 4 * 4 * 8, E_kv = 2 * 4 * 2 * 8, R = 2 * 4 * 4;
  for (int l = 0; l < 8; ++l) {
    const SpTraffic t = wf::parallel::wallfacer_traffic(dims, 8, 2, l, Pass::forward, same);
    CHECK(t.collective_sent == ((2 - 1) * (2 * E + 2 * E_kv) + (2 - 1) * 2 * R) * 4);
    CHECK(t.p2p_sent == 2 * 2 * E_kv * (l == 0 || l == 7 ? 1 : 2) * 4);
    CHECK(t.p2p_received == t.p2p_sent);
  }
  // C = 1 is ring attention in the forward.
  for (int P : {1, 2, 5, 8}) {
    const AttentionDims d{1, 4 * P, 2, 1, 3};
    for (int l = 0; l < P; ++l) {
      CHECK(wf::parallel::wallfacer_traffic(d, P, 1, l, Pass::forward, kBytes) ==
            wf::parallel::ring_attention_traffic(d, P, Pass::forward, kBytes));
    }
  }
  // Ulysses: (P-1)/P·(2E + 2E_kv + R) each way (R: lse or its gradient), forward and backward alike.
  const AttentionDims u{1, 16, 8, 4, 2};
  const std::int64_t Eu = 1 * 4 * 8 * 2, Eu_kv = 1 * 4 * 4 * 2, Ru = 1 * 4 * 8;
  CHECK(wf::parallel::ulysses_traffic(u, 4, Pass::forward, same).collective_sent ==
        3 * (2 * Eu + 2 * Eu_kv + Ru) / 4 * 4);
  CHECK(wf::parallel::ulysses_traffic(u, 4, Pass::backward, same) ==
        wf::parallel::ulysses_traffic(u, 4, Pass::forward, same));
  // h_kv = 2 < P = 4: each kv head goes to P/h_kv = 2 ranks, so K and V count twice:
  // (P-1)/P·(2E + 2·(P/h_kv)·E_kv + R).
  const AttentionDims replicated{1, 16, 8, 2, 2};
  const std::int64_t Er_kv = 1 * 4 * 2 * 2;
  CHECK(wf::parallel::ulysses_traffic(replicated, 4, Pass::forward, same).collective_sent ==
        3 * (2 * Eu + 2 * 2 * Er_kv + Ru) / 4 * 4);
  CHECK(wf::parallel::ulysses_traffic(replicated, 4, Pass::backward, same) ==
        wf::parallel::ulysses_traffic(replicated, 4, Pass::forward, same));
  // MQA at P = 8 moves what h_kv = P would: P copies of the one kv head.
  CHECK(wf::parallel::ulysses_traffic({1, 16, 8, 1, 2}, 8, Pass::forward, kBytes) ==
        wf::parallel::ulysses_traffic({1, 16, 8, 8, 2}, 8, Pass::forward, kBytes));
  // Nothing moves with one rank.
  CHECK(wf::parallel::ring_attention_traffic(u, 1, Pass::backward, kBytes) == SpTraffic{});
  CHECK(wf::parallel::wallfacer_traffic(u, 1, 1, 0, Pass::backward, kBytes) == SpTraffic{});
}

TEST_CASE("forward P2P summed over ranks: the doc's ratios to ring attention", "[parallel]") {
  // One element of one byte per rank per tensor: E = E_kv = 1, the doc's units.
  const auto p2p_total = [](int P, int C) {
    const AttentionDims unit{1, P, 1, 1, 1};
    return wf::parallel::wallfacer_traffic_total(unit, P, C, Pass::forward, {1, 1, 1}).p2p_sent;
  };
  CHECK(p2p_total(8, 1) == 112);  // ring: 2·(P-1) per rank
  CHECK(2 * p2p_total(8, 2) == p2p_total(8, 1));
  CHECK(p2p_total(16, 1) == 480);
  CHECK(p2p_total(16, 2) == 248);
  CHECK(p2p_total(16, 4) == 96);  // G = 1: the dispatch only
  // Tends to 1/C of ring's as P grows.
  for (int C : {2, 4}) {
    const double ratio = static_cast<double>(p2p_total(1024, C)) / static_cast<double>(p2p_total(1024, 1));
    CHECK(ratio == Approx(1.0 / C).epsilon(0.01));
  }
  const AttentionDims unit{1, 16, 1, 1, 1};
  CHECK(wf::parallel::ring_attention_traffic_total(unit, 16, Pass::forward, {1, 1, 1}).p2p_sent == 480);
}

TEST_CASE("the Ulysses head rule: P | h, and h_kv a multiple or a divisor of P", "[parallel]") {
  struct Heads {
    std::int64_t h, h_kv;
    int P;
  };
  // Scattered kv heads, replicated ones (MQA, GQA with h_kv < P), one rank.
  for (const Heads& ok : {Heads{8, 8, 4}, Heads{8, 4, 4}, Heads{16, 8, 4}, Heads{8, 2, 4}, Heads{8, 1, 4},
                          Heads{4, 2, 4}, Heads{4, 1, 2}, Heads{16, 2, 8}, Heads{6, 1, 3}, Heads{3, 3, 1}}) {
    INFO("h = " << ok.h << ", h_kv = " << ok.h_kv << ", P = " << ok.P);
    CHECK(wf::parallel::ulysses_heads_problem(ok.h, ok.h_kv, ok.P).empty());
  }
  CHECK(wf::parallel::ulysses_kv_heads_per_rank(8, 4) == 2);
  CHECK(wf::parallel::ulysses_kv_heads_per_rank(4, 4) == 1);
  CHECK(wf::parallel::ulysses_kv_heads_per_rank(2, 4) == 1);  // a copy, shared with one other rank
  // P ∤ h; h_kv < P not dividing P; h_kv > P not a multiple (rank 0 of 2 would read kv heads 0
  // and half of 1); h_kv not dividing h.
  for (const Heads& bad : {Heads{4, 2, 8}, Heads{6, 1, 4}, Heads{12, 3, 4}, Heads{24, 6, 8}, Heads{6, 3, 2},
                           Heads{12, 6, 4}, Heads{8, 3, 2}}) {
    INFO("h = " << bad.h << ", h_kv = " << bad.h_kv << ", P = " << bad.P);
    CHECK_THAT(wf::parallel::ulysses_heads_problem(bad.h, bad.h_kv, bad.P),
               Contains(fmt::format("do not split over the sp size P = {}", bad.P)) &&
                   Contains("use ring or wallfacer attention"));
  }
  CHECK_THAT(wf::parallel::ulysses_heads_problem(6, 3, 2), Contains("P can be 1, 3, 6;") &&
                                                               Contains("with h = 6 at P = 2, h_kv can be 1, 2, 6."));
}

TEST_CASE("traffic model rejects dims that do not split", "[parallel]") {
  const AttentionDims dims{1, 30, 4, 2, 8};
  CHECK_THAT(error_of([&] { wf::parallel::ring_attention_traffic(dims, 8, Pass::forward); }),
             Contains("N = 30") && Contains("P = 8"));
  // Ulysses: h not a multiple of P; h_kv < P not dividing P; h_kv > P not a multiple of P. Each
  // message names the sp sizes that work with the heads and the kv head counts that work at P.
  CHECK_THAT(error_of([&] { wf::parallel::ulysses_traffic({1, 32, 4, 2, 8}, 8, Pass::forward); }),
             Contains("traffic model: h = 4 query heads and h_kv = 2 kv heads do not split over the sp size P = 8") &&
                 Contains("P can be 1, 2, 4;") && Contains("at P = 8, h_kv can be none"));
  CHECK_THAT(error_of([&] { wf::parallel::ulysses_traffic({1, 24, 12, 3, 8}, 4, Pass::forward); }),
             Contains("h_kv = 3 kv heads") && Contains("P can be 1, 3, 6, 12;") &&
                 Contains("with h = 12 at P = 4, h_kv can be 1, 2, 4, 12."));
  CHECK_THAT(error_of([&] { wf::parallel::ulysses_traffic({1, 16, 12, 6, 8}, 4, Pass::forward); }),
             Contains("h_kv = 6 kv heads") && Contains("P can be 1, 2, 3, 6, 12;") &&
                 Contains("h_kv can be 1, 2, 4, 12."));
  CHECK_THAT(error_of([&] { wf::parallel::wallfacer_traffic({1, 32, 4, 2, 8}, 8, 4, 0, Pass::forward); }),
             Contains("C = 4"));
  CHECK_THAT(error_of([&] { wf::parallel::wallfacer_traffic({1, 32, 4, 3, 8}, 8, 2, 0, Pass::forward); }),
             Contains("kv_heads 3 must divide heads 4"));
  CHECK_THAT(error_of([&] { wf::parallel::wallfacer_traffic({1, 32, 4, 2, 8}, 8, 2, 9, Pass::forward); }),
             Contains("sp index 9"));
}

TEST_CASE("ulysses-wallfacer traffic: the Ulysses part over U plus the WallFacer part over P/U",
          "[parallel][ulysses_wallfacer]") {
  // P = 8, U = 2, C = 2: Ulysses over pairs with n = 4 tokens, h = 4, h_kv = 2 (E = 256, E_kv =
  // 128, R = 32): 2·(E + E_kv)·4·(1/2) + R·4·(1/2) = 1600 bytes of all-to-all. WallFacer over
  // W = 4 with N/W = 8 tokens, h/U = 2, h_kv/U = 1 (E' = 256, E_kv' = 128, R' = 32), G = 1:
  // collectives (C−1)·(E'a + 2E_kv'a + C·R's + E'p) = 3328, P2P the dispatch 2·C·E_kv'·a = 2048
  // except on the self-dispatching WallFacer ranks 0 and 3 (logical 0, 1, 6, 7).
  const AttentionDims dims{2, 32, 4, 2, 8};
  const ElementBytes same{4, 4, 4};
  for (int l = 0; l < 8; ++l) {
    const bool self = l / 2 == 0 || l / 2 == 3;
    const std::int64_t p2p = self ? 0 : 2048;
    CHECK(wf::parallel::ulysses_wallfacer_traffic(dims, 8, 2, 2, l, Pass::forward, same) ==
          SpTraffic{p2p, p2p, 4928, 4928});
    CHECK(wf::parallel::sp_attention_traffic(wf::parallel::SpStrategy::ulysses_wallfacer, dims, 8, 2, 2, l,
                                             Pass::forward, same) == SpTraffic{p2p, p2p, 4928, 4928});
  }
  for (int P : {4, 8, 16}) {
    const AttentionDims d{2, 6 * P, 2 * P, 2, 5};
    for (int U = 1; U <= P; ++U) {
      if (P % U != 0) continue;
      for (int C : wf::comm::valid_team_sizes(P / U)) {
        for (Pass pass : {Pass::forward, Pass::backward}) {
          for (BackwardKv kv : {BackwardKv::redispatch, BackwardKv::keep_forward}) {
            for (int l = 0; l < P; ++l) {
              INFO("P = " << P << ", U = " << U << ", C = " << C << ", logical " << l);
              const wf::parallel::UlyssesWallFacerDims parts = wf::parallel::ulysses_wallfacer_dims(d, P, U);
              CHECK(parts.ulysses.seq_len == d.seq_len / (P / U));
              CHECK(parts.wallfacer.heads == d.heads / U);
              SpTraffic sum = wf::parallel::ulysses_traffic(parts.ulysses, U, pass, kBytes);
              sum += wf::parallel::wallfacer_traffic(parts.wallfacer, P / U, C, l / U, pass, kBytes, kv);
              const SpTraffic hybrid = wf::parallel::ulysses_wallfacer_traffic(d, P, U, C, l, pass, kBytes, kv);
              CHECK(hybrid == sum);
              // U = 1 is WallFacer's formula and U = P (C = 1) Ulysses'.
              if (U == 1) CHECK(hybrid == wf::parallel::wallfacer_traffic(d, P, C, l, pass, kBytes, kv));
              if (U == P) CHECK(hybrid == wf::parallel::ulysses_traffic(d, P, pass, kBytes));
            }
          }
        }
        for (int l = 0; l < P; ++l) {  // the replayed backward: both parts' replayed backwards
          SpTraffic replay = wf::parallel::ulysses_traffic(wf::parallel::ulysses_wallfacer_dims(d, P, U).ulysses, U,
                                                           Pass::forward, kBytes);
          replay += wf::parallel::ulysses_traffic(wf::parallel::ulysses_wallfacer_dims(d, P, U).ulysses, U,
                                                  Pass::backward, kBytes);
          replay += wf::parallel::sp_replay_backward_traffic(wf::parallel::SpStrategy::wallfacer,
                                                             wf::parallel::ulysses_wallfacer_dims(d, P, U).wallfacer,
                                                             P / U, 1, C, l / U, kBytes);
          CHECK(wf::parallel::sp_replay_backward_traffic(wf::parallel::SpStrategy::ulysses_wallfacer, d, P, U, C, l,
                                                         kBytes) == replay);
        }
      }
    }
  }
  CHECK_THAT(error_of([&] { wf::parallel::ulysses_wallfacer_traffic(dims, 8, 3, 1, 0, Pass::forward); }),
             Contains("the Ulysses degree U = 3 must be >= 1 and divide P = 8"));
  CHECK_THAT(error_of([&] { wf::parallel::ulysses_wallfacer_traffic({2, 32, 6, 6, 8}, 8, 4, 1, 0, Pass::forward); }),
             Contains("ulysses-wallfacer with U = 4") && Contains("h = 6 query heads"));
}
