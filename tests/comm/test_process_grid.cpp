// The process grid: golden rank lists written out by hand from the decomposition rules in
// wallfacer-algorithm.md ("Layout"), then properties of the WallFacer peers over many (P, C).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"

using Catch::Contains;
using wf::comm::ParallelConfig;
using wf::comm::Placement;
using wf::comm::ProcessGrid;
using wf::comm::WallFacerLayout;
using Groups = std::vector<std::vector<int>>;

namespace {

constexpr Placement kBothPlacements[] = {Placement::collectives_intra, Placement::p2p_intra};

ParallelConfig sp_only(int P, int C, Placement placement) {
  ParallelConfig config;
  config.sp = P;
  config.C = C;
  config.placement = placement;
  return config;
}

// Per world rank, one field of the WallFacer peers.
template <typename Field>
std::vector<int> peer_map(const ProcessGrid& grid, Field field) {
  std::vector<int> map;
  for (int r = 0; r < grid.world_size(); ++r) map.push_back(field(grid.wallfacer_peers_of(r)));
  return map;
}
std::vector<int> send_map(const ProcessGrid& g) {
  return peer_map(g, [](auto p) { return p.initial_send; });
}
std::vector<int> recv_map(const ProcessGrid& g) {
  return peer_map(g, [](auto p) { return p.initial_recv; });
}
std::vector<int> next_map(const ProcessGrid& g) {
  return peer_map(g, [](auto p) { return p.ring_next; });
}
std::vector<int> prev_map(const ProcessGrid& g) {
  return peer_map(g, [](auto p) { return p.ring_prev; });
}

std::string validation_message(const ParallelConfig& config, int world_size) {
  try {
    ProcessGrid::validate(config, world_size);
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Moves K/V exactly as the forward does, through the peer maps (not through the closed-form
// formulas, which are what is being checked): held[s] = the team whose K/V sp index s holds.
std::vector<int> after_dispatch(const WallFacerLayout& layout) {
  std::vector<int> held(static_cast<std::size_t>(layout.ranks()), -1);
  for (int s = 0; s < layout.ranks(); ++s) held[static_cast<std::size_t>(layout.initial_send(s))] = layout.team(s);
  return held;
}
std::vector<int> after_ring_shift(const WallFacerLayout& layout, const std::vector<int>& held) {
  std::vector<int> next(held.size(), -1);
  for (int s = 0; s < layout.ranks(); ++s)
    next[static_cast<std::size_t>(layout.ring_next(s))] = held[static_cast<std::size_t>(s)];
  return next;
}

}  // namespace

// ---- golden layouts ---------------------------------------------------------------------

TEST_CASE("dp2 tp2 sp2 in the default order tp-sp-dp-pp", "[comm][grid]") {
  ParallelConfig config;
  config.dp = 2, config.tp = 2, config.sp = 2;
  const ProcessGrid grid(config, 8, 6);  // rank = tp + 2*sp + 4*dp
  CHECK(grid.all_groups("world") == Groups{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(grid.all_groups("tp") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.all_groups("sp") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.all_groups("dp") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.all_groups("pp") == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(grid.all_groups("dp_sp") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});
  // C = 1: every rank is its own team and the sub-ring is the whole sp group.
  CHECK(grid.all_groups("sp.team") == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(grid.all_groups("sp.ring") == grid.all_groups("sp"));

  CHECK(grid.coord("tp") == 0);
  CHECK(grid.coord("sp") == 1);
  CHECK(grid.coord("dp") == 1);
  CHECK(grid.coord("pp") == 0);
  CHECK(grid.group("sp") == std::vector<int>{4, 6});
  CHECK(grid.group_rank("sp") == 1);
  CHECK(grid.group_rank("dp_sp") == 3);
  CHECK(grid.group_size("world") == 8);
  CHECK(grid.group_rank("world") == 6);
  CHECK(grid.pp_next() == -1);
  CHECK(grid.pp_prev() == -1);
  // C = 1 is plain ring attention: no dispatch, ring over the sp group.
  const auto peers = grid.wallfacer_peers();
  CHECK(peers.initial_send == 6);
  CHECK(peers.initial_recv == 6);
  CHECK(peers.ring_next == 4);
  CHECK(peers.ring_prev == 4);
}

TEST_CASE("dp2 tp2 sp2 in the order dp-tp-sp-pp", "[comm][grid]") {
  ParallelConfig config;
  config.dp = 2, config.tp = 2, config.sp = 2;
  config.order = "dp-tp-sp-pp";
  const ProcessGrid grid(config, 8, 5);  // rank = dp + 2*tp + 4*sp
  CHECK(grid.all_groups("world") == Groups{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(grid.all_groups("dp") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.all_groups("tp") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.all_groups("sp") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.all_groups("dp_sp") == Groups{{0, 4, 1, 5}, {2, 6, 3, 7}});
  CHECK(grid.coord("dp") == 1);
  CHECK(grid.coord("tp") == 0);
  CHECK(grid.coord("sp") == 1);
  CHECK(grid.group("tp") == std::vector<int>{5, 7});
  CHECK(grid.group_rank("dp_sp") == 3);
}

TEST_CASE("pipeline neighbours: tp2 pp2 sp2, the ends have none", "[comm][grid]") {
  ParallelConfig config;
  config.tp = 2, config.pp = 2, config.sp = 2;
  const ProcessGrid first(config, 8, 1), last(config, 8, 6);  // rank = tp + 2*sp + 4*pp
  CHECK(first.all_groups("pp") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(first.pp_next() == 5);
  CHECK(first.pp_prev() == -1);
  CHECK(last.pp_next() == -1);
  CHECK(last.pp_prev() == 2);
}

TEST_CASE("sp8 C=2: teams, sub-rings and the Algorithm 2/3 neighbour maps", "[comm][grid]") {
  SECTION("collectives-intra: team members adjacent") {
    const ProcessGrid grid(sp_only(8, 2, Placement::collectives_intra), 8, 0);
    CHECK(grid.all_groups("sp.team") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
    CHECK(grid.all_groups("sp.ring") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    CHECK(send_map(grid) == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
    CHECK(recv_map(grid) == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});
    CHECK(next_map(grid) == std::vector<int>{2, 3, 0, 1, 6, 7, 4, 5});
    CHECK(prev_map(grid) == next_map(grid));  // G = 2: next and last coincide
  }
  SECTION("p2p-intra: sub-ring members adjacent") {
    const ProcessGrid grid(sp_only(8, 2, Placement::p2p_intra), 8, 0);
    CHECK(grid.all_groups("sp.team") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    CHECK(grid.all_groups("sp.ring") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
    CHECK(send_map(grid) == std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7});
    CHECK(recv_map(grid) == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
    CHECK(next_map(grid) == std::vector<int>{1, 0, 3, 2, 5, 4, 7, 6});
    CHECK(peer_map(grid, [](auto p) { return p.team; }) == std::vector<int>{0, 1, 0, 1, 2, 3, 2, 3});
    CHECK(peer_map(grid, [](auto p) { return p.member; }) == std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1});
  }
}

TEST_CASE("sp16 C=2 under both placements", "[comm][grid]") {
  SECTION("collectives-intra") {
    const ProcessGrid grid(sp_only(16, 2, Placement::collectives_intra), 16, 0);
    CHECK(grid.all_groups("sp.team") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
    CHECK(grid.all_groups("sp.ring") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
    CHECK(send_map(grid) == std::vector<int>{0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15});
    CHECK(recv_map(grid) == std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15});
    CHECK(next_map(grid) == std::vector<int>{2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9});
    CHECK(prev_map(grid) == std::vector<int>{6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13});
    CHECK(peer_map(grid, [](auto p) { return p.team_group; }) ==
          std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});
    CHECK(peer_map(grid, [](auto p) { return p.ring_pos; }) ==
          std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3});
  }
  SECTION("p2p-intra") {
    const ProcessGrid grid(sp_only(16, 2, Placement::p2p_intra), 16, 0);
    CHECK(grid.all_groups("sp.team") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
    CHECK(grid.all_groups("sp.ring") == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
    CHECK(send_map(grid) == std::vector<int>{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15});
    CHECK(recv_map(grid) == std::vector<int>{0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15});
    CHECK(next_map(grid) == std::vector<int>{1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12});
    CHECK(prev_map(grid) == std::vector<int>{3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14});
    CHECK(peer_map(grid, [](auto p) { return p.team; }) ==
          std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7});
  }
}

TEST_CASE("sp16 C=4: G = 1, so both placements coincide and only the dispatch moves K/V", "[comm][grid]") {
  for (Placement placement : kBothPlacements) {
    const ProcessGrid grid(sp_only(16, 4, placement), 16, 0);
    CHECK(grid.all_groups("sp.team") == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
    CHECK(grid.all_groups("sp.ring").size() == 16);
    // The dispatch is a transpose of the 4x4 (team, member) grid: its own inverse.
    const std::vector<int> transpose{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    CHECK(send_map(grid) == transpose);
    CHECK(recv_map(grid) == transpose);
    CHECK(next_map(grid) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  }
}

TEST_CASE("sp64 C=4: rank 0's sub-ring holds K/V of teams 0, 4, 8, 12 (paper Fig. 4)", "[comm][grid]") {
  SECTION("collectives-intra") {
    const ProcessGrid grid(sp_only(64, 4, Placement::collectives_intra), 64, 0);
    CHECK(grid.group("sp.ring") == std::vector<int>{0, 4, 8, 12});
    CHECK(grid.group("sp.team") == std::vector<int>{0, 1, 2, 3});
  }
  SECTION("p2p-intra") {
    const ProcessGrid grid(sp_only(64, 4, Placement::p2p_intra), 64, 0);
    CHECK(grid.group("sp.ring") == std::vector<int>{0, 1, 2, 3});
    CHECK(grid.group("sp.team") == std::vector<int>{0, 4, 8, 12});
  }
  for (Placement placement : kBothPlacements) {
    const ProcessGrid grid(sp_only(64, 4, placement), 64, 0);
    const WallFacerLayout& layout = grid.wallfacer();
    const std::vector<int> held = after_dispatch(layout);
    std::vector<int> sub_ring_teams;
    for (int rank : grid.group("sp.ring")) sub_ring_teams.push_back(held[static_cast<std::size_t>(rank)]);
    CHECK(sub_ring_teams == std::vector<int>{0, 4, 8, 12});
    // Rank 0 (j = 0) then meets them in the order ((0 - i) mod 4)·4.
    std::vector<int> rank0_steps;
    for (int step = 0; step < layout.ring_size(); ++step) rank0_steps.push_back(layout.kv_team_at_step(0, step));
    CHECK(rank0_steps == std::vector<int>{0, 12, 8, 4});
  }
}

TEST_CASE("P=8, C=2: exactly ranks 0 and 7 dispatch to themselves", "[comm][grid]") {
  for (Placement placement : kBothPlacements) {
    const WallFacerLayout layout(8, 2, placement);
    std::vector<int> self;
    for (int s = 0; s < 8; ++s) {
      if (layout.initial_send(s) == s) self.push_back(s);
    }
    CHECK(self == std::vector<int>{0, 7});
  }
}

TEST_CASE("dp2 sp4 tp2 with C=2: dp_sp groups and the sp sub-layout embedded in the world", "[comm][grid]") {
  ParallelConfig config;
  config.dp = 2, config.sp = 4, config.tp = 2, config.C = 2;
  const ProcessGrid grid(config, 16, 2);  // rank = tp + 2*sp + 8*dp
  CHECK(grid.all_groups("dp_sp") == Groups{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}});
  CHECK(grid.all_groups("sp") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
  CHECK(grid.all_groups("dp") == Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  CHECK(grid.all_groups("sp.team") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(grid.all_groups("sp.ring").size() == 16);  // G = 1
  CHECK(grid.group_rank("dp_sp") == 1);
  // sp index 1 (team 0, member 1) dispatches to sp index 2 (team 1, member 0).
  CHECK(grid.wallfacer_peers().initial_send == 4);
  CHECK(grid.wallfacer_peers().initial_recv == 4);
  CHECK(grid.wallfacer_peers_of(11).initial_send == 13);  // (tp 1, sp 1, dp 1) -> sp 2
}

// ---- properties -------------------------------------------------------------------------

// The first property of one layout that fails, or "" when all hold. Checked by hand rather
// than with one REQUIRE per rank, so that hundreds of layouts stay well under a second.
std::string wallfacer_violation(const WallFacerLayout& layout) {
  const int P = layout.ranks(), C = layout.team_size(), G = layout.ring_size(), T = layout.num_teams();
  const bool collectives_intra = layout.placement() == Placement::collectives_intra;
  if (G * C * C != P) return "G * C * C != P";

  // Logical <-> physical is a bijection, and the placement puts the right ranks side by side.
  std::vector<int> logical_hits(static_cast<std::size_t>(P), 0);
  for (int s = 0; s < P; ++s) {
    const auto p = layout.position(s);
    if (layout.sp_index(p) != s) return fmt::format("sp_index(position({})) != {}", s, s);
    ++logical_hits[static_cast<std::size_t>(layout.logical_index(s))];
    if (collectives_intra && layout.logical_index(s) != s) return fmt::format("collectives-intra moved {}", s);
    if (collectives_intra && p.member + 1 < C && layout.team(s + 1) != layout.team(s))
      return fmt::format("collectives-intra: team of {} not adjacent", s);
    if (!collectives_intra && p.ring_pos + 1 < G && layout.ring_next(s) != s + 1)
      return fmt::format("p2p-intra: sub-ring of {} not adjacent", s);
  }
  if (std::count(logical_hits.begin(), logical_hits.end(), 1) != P) return "logical index is not a bijection";

  // initial_send and initial_recv are inverse permutations; so are ring next and ring last,
  // which stay on the sub-ring (same team group and member).
  for (int s = 0; s < P; ++s) {
    if (layout.initial_recv(layout.initial_send(s)) != s) return fmt::format("recv(send({})) != {}", s, s);
    if (layout.initial_send(layout.initial_recv(s)) != s) return fmt::format("send(recv({})) != {}", s, s);
    if (layout.ring_prev(layout.ring_next(s)) != s) return fmt::format("prev(next({})) != {}", s, s);
    const auto here = layout.position(s), next = layout.position(layout.ring_next(s));
    if (next.member != here.member || next.team_group != here.team_group)
      return fmt::format("ring_next({}) leaves the sub-ring", s);
  }

  // After dispatch (team gG+j, member m) holds team jC+m; at step i, team ((j-i) mod G)C+m.
  std::vector<int> held = after_dispatch(layout);
  std::vector<std::vector<int>> seen_by_rank(static_cast<std::size_t>(P));
  std::vector<int> meetings(static_cast<std::size_t>(T * T), 0);  // [query team][K/V team]
  for (int step = 0; step < G; ++step) {
    if (step > 0) held = after_ring_shift(layout, held);
    for (int s = 0; s < P; ++s) {
      const auto p = layout.position(s);
      const int expected = ((p.ring_pos - step + G) % G) * C + p.member;
      if (held[static_cast<std::size_t>(s)] != expected)
        return fmt::format("step {}: sp index {} holds team {}, expected {}", step, s,
                           held[static_cast<std::size_t>(s)], expected);
      if (layout.kv_team_at_step(s, step) != expected) return fmt::format("kv_team_at_step({}, {})", s, step);
      if (step == 0 && expected != p.ring_pos * C + p.member) return "dispatch formula";
      seen_by_rank[static_cast<std::size_t>(s)].push_back(expected);
      ++meetings[static_cast<std::size_t>(layout.team(s) * T + expected)];
    }
  }
  // Each sub-ring member sees every team ≡ m (mod C) exactly once.
  for (int s = 0; s < P; ++s) {
    std::vector<int> seen = seen_by_rank[static_cast<std::size_t>(s)];
    std::sort(seen.begin(), seen.end());
    for (int k = 0; k < G; ++k) {
      if (seen[static_cast<std::size_t>(k)] != k * C + layout.position(s).member)
        return fmt::format("sp index {} does not see every team = m (mod C) once", s);
    }
  }
  // Over the C members of a team, every team's K/V meets the team's queries exactly once.
  if (std::count(meetings.begin(), meetings.end(), 1) != T * T) return "some (query team, K/V team) pair meets != once";
  return "";
}

TEST_CASE("WallFacer peers: properties over many (P, C) and both placements", "[comm][grid]") {
  int layouts_checked = 0;
  for (int P = 1; P <= 128; ++P) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      for (Placement placement : kBothPlacements) {
        INFO("P = " << P << ", C = " << C << ", placement " << wf::comm::placement_name(placement));
        REQUIRE(wallfacer_violation(WallFacerLayout(P, C, placement)) == "");
        ++layouts_checked;
      }
    }
  }
  CHECK(layouts_checked == 394);  // 197 (P, C) pairs with C*C | P, P <= 128
}

TEST_CASE("every group kind partitions the world consistently, in every order", "[comm][grid]") {
  const std::vector<std::string> orders = {"tp-sp-dp-pp", "pp-dp-sp-tp", "sp-tp-pp-dp", "dp-pp-tp-sp"};
  for (const std::string& order : orders) {
    for (Placement placement : kBothPlacements) {
      ParallelConfig config;
      config.dp = 2, config.tp = 3, config.pp = 2, config.sp = 8, config.C = 2;
      config.order = order;
      config.placement = placement;
      const int world = 96;
      INFO("order " << order << ", placement " << wf::comm::placement_name(placement));
      const ProcessGrid grid(config, world, 0);
      const std::map<std::string, int> expected_sizes = {{"world", 96}, {"dp", 2},      {"tp", 3},      {"pp", 2},
                                                         {"sp", 8},     {"sp.team", 2}, {"sp.ring", 2}, {"dp_sp", 16},
                                                         {"sp.ulysses", 1}, {"sp.wallfacer", 8},
                                                         {"pp.embedding", 2}};
      for (std::string_view name : ProcessGrid::group_names()) {
        const auto groups = grid.all_groups(name);
        std::vector<int> count(world, 0);
        for (const auto& group : groups) {
          REQUIRE(static_cast<int>(group.size()) == expected_sizes.at(std::string(name)));
          for (int index = 0; index < static_cast<int>(group.size()); ++index) {
            const int member = group[static_cast<std::size_t>(index)];
            ++count[static_cast<std::size_t>(member)];
            const ProcessGrid view(config, world, member);  // what that rank computes on its own
            REQUIRE(view.group(name) == group);
            REQUIRE(view.group_rank(name) == index);
          }
        }
        REQUIRE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
      }
      for (int r = 0; r < world; ++r) {
        const ProcessGrid view(config, world, r);
        for (const char* axis : {"tp", "dp", "pp", "sp"}) REQUIRE(view.group_rank(axis) == view.coord(axis));
        REQUIRE(view.group_rank("dp_sp") == view.coord("dp") * 8 + view.coord("sp"));
        // The WallFacer peers stay inside the rank's own sp group.
        const auto peers = view.wallfacer_peers();
        const auto& sp = view.group("sp");
        for (int peer : {peers.initial_send, peers.initial_recv, peers.ring_next, peers.ring_prev}) {
          REQUIRE(std::find(sp.begin(), sp.end(), peer) != sp.end());
        }
        if (view.pp_next() >= 0) REQUIRE(ProcessGrid(config, world, view.pp_next()).pp_prev() == r);
      }
    }
  }
}

// ---- the ulysses-wallfacer hybrid: U Ulysses ranks x sp/U WallFacer ranks -----------------

ParallelConfig hybrid(int sp, int U, int C, bool ulysses_inner, int dp = 1) {
  ParallelConfig config = sp_only(sp, C, Placement::collectives_intra);
  config.U = U;
  config.ulysses_inner = ulysses_inner;
  config.dp = dp;
  return config;
}

TEST_CASE("sp8 U=2 C=2, Ulysses ranks inner: all-to-all pairs, WallFacer groups of 4 split into teams",
          "[comm][grid][ulysses_wallfacer]") {
  const ProcessGrid grid(hybrid(8, 2, 2, true), 8, 0);  // sp index = w*2 + u
  CHECK(grid.all_groups("sp") == Groups{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(grid.all_groups("sp.ulysses") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.all_groups("sp.wallfacer") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(grid.all_groups("sp.team") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.all_groups("sp.ring") == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});  // G = 4 / 2² = 1
  CHECK(grid.wallfacer().ranks() == 4);
  // The WallFacer layout of 4 (P = 4, C = 2: teams {0, 1}, {2, 3}) inside each WallFacer group:
  // the dispatch sends w 1 <-> 2 and keeps 0 and 3, so world 2 <-> 4 and 3 <-> 5.
  CHECK(send_map(grid) == std::vector<int>{0, 1, 4, 5, 2, 3, 6, 7});
  CHECK(recv_map(grid) == send_map(grid));
  for (int s = 0; s < 8; ++s) {
    CHECK(grid.ulysses_index(s) == s % 2);
    CHECK(grid.wallfacer_index(s) == s / 2);
    CHECK(grid.sp_index_of(s % 2, s / 2) == s);
    CHECK(grid.sp_logical_index(s) == s);  // collectives-intra: logical w = w
  }
}

TEST_CASE("sp8 U=2 C=2, WallFacer ranks inner: the WallFacer groups are adjacent", "[comm][grid][ulysses_wallfacer]") {
  const ProcessGrid grid(hybrid(8, 2, 2, false), 8, 5);  // sp index = u*4 + w
  CHECK(grid.all_groups("sp.ulysses") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.all_groups("sp.wallfacer") == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.all_groups("sp.team") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.group("sp.ulysses") == std::vector<int>{1, 5});
  CHECK(grid.group_rank("sp.ulysses") == 1);
  CHECK(grid.group_rank("sp.wallfacer") == 1);
  CHECK(send_map(grid) == std::vector<int>{0, 2, 1, 3, 4, 6, 5, 7});
  CHECK(grid.ulysses_index(5) == 1);
  CHECK(grid.wallfacer_index(5) == 1);
  CHECK(grid.sp_logical_index(5) == 1 * 2 + 1);  // l = w·U + u
}

TEST_CASE("sp8 U=2 C=1 in dp 2: sub-rings of 4 inside each WallFacer group, peers inside it",
          "[comm][grid][ulysses_wallfacer]") {
  const ProcessGrid grid(hybrid(8, 2, 1, true, 2), 16, 9);  // order tp-sp-dp-pp: rank = dp*8 + sp
  CHECK(grid.all_groups("sp.ring") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
  CHECK(grid.all_groups("sp.wallfacer") == grid.all_groups("sp.ring"));
  CHECK(grid.group("sp.ulysses") == std::vector<int>{8, 9});
  CHECK(next_map(grid) == std::vector<int>{2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9});
  CHECK(prev_map(grid) == std::vector<int>{6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13});
  CHECK(grid.all_groups("dp_sp").size() == 1);
}

TEST_CASE("U = 1: sp.wallfacer is the sp group and sp.ulysses single ranks", "[comm][grid][ulysses_wallfacer]") {
  const ProcessGrid grid(sp_only(8, 2, Placement::p2p_intra), 8, 3);
  CHECK(grid.all_groups("sp.wallfacer") == grid.all_groups("sp"));
  CHECK(grid.all_groups("sp.ulysses") == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  for (int s = 0; s < 8; ++s) CHECK(grid.sp_logical_index(s) == grid.wallfacer().logical_index(s));
}

TEST_CASE("the hybrid's groups partition the world in every order", "[comm][grid][ulysses_wallfacer]") {
  for (const std::string order : {"tp-sp-dp-pp", "dp-pp-tp-sp"}) {
    for (bool inner : {true, false}) {
      ParallelConfig config = hybrid(16, 2, 2, inner, 2);
      config.tp = 2;
      config.order = order;
      const int world = 64;
      const std::map<std::string, int> sizes = {{"sp.ulysses", 2}, {"sp.wallfacer", 8}, {"sp.team", 2}, {"sp.ring", 2}};
      const ProcessGrid grid(config, world, 0);
      for (const auto& [name, size] : sizes) {
        std::vector<int> count(world, 0);
        for (const auto& group : grid.all_groups(name)) {
          REQUIRE(static_cast<int>(group.size()) == size);
          for (int index = 0; index < size; ++index) {
            const int member = group[static_cast<std::size_t>(index)];
            ++count[static_cast<std::size_t>(member)];
            const ProcessGrid view(config, world, member);
            REQUIRE(view.group(name) == group);
            REQUIRE(view.group_rank(name) == index);
          }
        }
        REQUIRE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
      }
      for (int r = 0; r < world; ++r) {  // the WallFacer peers stay in the rank's WallFacer group
        const ProcessGrid view(config, world, r);
        const auto& group = view.group("sp.wallfacer");
        const auto peers = view.wallfacer_peers();
        for (int peer : {peers.initial_send, peers.initial_recv, peers.ring_next, peers.ring_prev}) {
          REQUIRE(std::find(group.begin(), group.end(), peer) != group.end());
        }
        REQUIRE(view.group_rank("sp.ulysses") == view.ulysses_index(view.coord("sp")));
        REQUIRE(view.group_rank("sp.wallfacer") == view.wallfacer_index(view.coord("sp")));
      }
    }
  }
}

TEST_CASE("the hybrid in to_table and to_json", "[comm][grid][ulysses_wallfacer]") {
  const ProcessGrid grid(hybrid(8, 2, 2, false), 8, 0);
  const std::string table = grid.to_table();
  CHECK_THAT(table, Contains("wallfacer: C = 2 (2 teams of 2 per WallFacer group of sp/U = 4 ranks), G = 1"));
  CHECK_THAT(table,
             Contains("ulysses: U = 2 (all-to-all over sp.ulysses), WallFacer ranks adjacent (sp index = u*4 + w)"));
  CHECK_THAT(table, Contains("sp.ulysses      4 x 2    [0 4] [1 5] [2 6] [3 7]"));
  CHECK_THAT(table, Contains("sp.wallfacer    2 x 4    [0 1 2 3] [4 5 6 7]"));
  CHECK_THAT(table, Contains("wf index"));
  const auto json = nlohmann::json::parse(grid.to_json());
  CHECK(json["config"]["U"] == 2);
  CHECK(json["config"]["ulysses_inner"] == false);
  CHECK(json["wallfacer"]["group_size"] == 4);
  CHECK(json["groups"]["sp.ulysses"].get<Groups>() == grid.all_groups("sp.ulysses"));
  CHECK(json["ranks"][5]["ulysses_index"] == 1);
  CHECK(json["ranks"][5]["wallfacer_index"] == 1);
}

// ---- validation -------------------------------------------------------------------------

TEST_CASE("validation: one message naming every problem", "[comm][grid]") {
  ParallelConfig config;
  config.dp = 2, config.tp = 2, config.sp = 4;
  CHECK_NOTHROW(ProcessGrid::validate(config, 16));

  SECTION("the sizes must multiply to the world size") {
    const std::string message = validation_message(config, 8);
    CHECK_THAT(message, Contains("invalid parallel layout for a world of 8 ranks"));
    CHECK_THAT(message, Contains("dp 2 x tp 2 x pp 1 x sp 4 = 16 ranks, but the world has 8"));
    // Which sizes would fit, each with the other three as they are; a size past the world or
    // not dividing it is named, with the world's divisors.
    CHECK_THAT(message, Contains("keeping the other sizes, dp = 1 or tp = 1 or sp = 2 would fit"));
    config.tp = 16;
    CHECK_THAT(validation_message(config, 8), Contains("tp = 16 exceeds the world (each size must be one of 8's "
                                                       "divisors: 1, 2, 4, 8)"));
    config.tp = 3;
    CHECK_THAT(validation_message(config, 8), Contains("tp = 3 does not divide the world"));
  }
  SECTION("every size at least 1") {
    config.tp = 0, config.pp = -1;
    const std::string message = validation_message(config, 8);
    CHECK_THAT(message, Contains("tp = 0 must be at least 1"));
    CHECK_THAT(message, Contains("pp = -1 must be at least 1"));
    CHECK_THAT(validation_message(ParallelConfig{}, 0), Contains("the world size 0 must be at least 1"));
  }
  SECTION("huge sizes do not overflow the product") {
    config.dp = config.tp = config.pp = config.sp = 1 << 30;
    CHECK_THAT(validation_message(config, 8), Contains("but the world has 8"));
  }
  SECTION("C*C must divide sp, and the message lists the valid C") {
    config.C = 3;
    CHECK_THAT(
        validation_message(config, 16),
        Contains("C = 3 does not fit sp = 4: WallFacer needs C >= 1 with C*C dividing sp; valid C for sp = 4: 1, 2"));
    config.C = 0;
    CHECK_THAT(validation_message(config, 16), Contains("C = 0 does not fit sp = 4"));
    config.sp = 64, config.dp = 1, config.tp = 1;
    config.C = 16;
    CHECK_THAT(validation_message(config, 64), Contains("valid C for sp = 64: 1, 2, 4, 8"));
  }
  SECTION("U must divide sp, and C*C must divide sp/U") {
    config.sp = 8, config.dp = 1, config.tp = 1;
    config.U = 3;
    CHECK_THAT(validation_message(config, 8),
               Contains("U = 3 does not divide sp = 8: the Ulysses degree of ulysses-wallfacer must be a divisor of "
                        "sp (the sp group is U Ulysses ranks times sp/U WallFacer ranks); valid U for sp = 8: 1, 2, 4, "
                        "8"));
    config.U = 0;
    CHECK_THAT(validation_message(config, 8), Contains("U = 0 does not divide sp = 8"));
    config.U = 4, config.C = 2;
    CHECK_THAT(validation_message(config, 8),
               Contains("C = 2 does not fit sp / U = 8 / 4 = 2: WallFacer runs over groups of sp/U ranks and needs C "
                        ">= 1 with C*C dividing sp/U; valid C for sp/U = 2: 1 (or choose another U)"));
    config.U = 2;
    CHECK_NOTHROW(ProcessGrid::validate(config, 8));
  }
  SECTION("order must be a permutation of tp, sp, dp, pp") {
    config.order = "tp-sp-dp-xx";
    CHECK_THAT(validation_message(config, 16), Contains("order 'tp-sp-dp-xx'"));
    CHECK_THAT(validation_message(config, 16), Contains("'xx' is not one of them"));
    CHECK_THAT(validation_message(config, 16), Contains("'pp' is missing"));
    config.order = "tp-sp-dp-pp-tp";
    CHECK_THAT(validation_message(config, 16), Contains("'tp' appears more than once"));
    config.order = "tp,sp,dp,pp";
    CHECK_THAT(validation_message(config, 16), Contains("'tp,sp,dp,pp' is not one of them"));
  }
  SECTION("placement must be one of the two") {
    config.placement = static_cast<Placement>(7);
    CHECK_THAT(validation_message(config, 16), Contains("placement 7 is not one of collectives-intra, p2p-intra"));
  }
  SECTION("several problems are reported together, identically every time") {
    config.C = 3;
    config.order = "tp-sp";
    const std::string message = validation_message(config, 8);
    CHECK_THAT(message, Contains("= 16 ranks, but the world has 8"));
    CHECK_THAT(message, Contains("C = 3 does not fit sp = 4"));
    CHECK_THAT(message, Contains("'dp' is missing"));
    CHECK(validation_message(config, 8) == message);
  }
  SECTION("the constructor validates first, then checks the rank") {
    CHECK_THROWS_WITH(ProcessGrid(config, 8, 0), Contains("but the world has 8"));
    CHECK_THROWS_WITH(ProcessGrid(config, 16, 16), Contains("rank 16 is outside the world of 16 ranks"));
    CHECK_THROWS_WITH(ProcessGrid(config, 16, -1), Contains("rank -1 is outside"));
  }
}

TEST_CASE("names: placements, group kinds, axes", "[comm][grid]") {
  CHECK(wf::comm::parse_placement("collectives-intra") == Placement::collectives_intra);
  CHECK(wf::comm::parse_placement("p2p-intra") == Placement::p2p_intra);
  CHECK(wf::comm::placement_name(Placement::p2p_intra) == "p2p-intra");
  CHECK(wf::comm::placement_name(Placement::collectives_intra) == "collectives-intra");
  CHECK_THROWS_WITH(wf::comm::parse_placement("p2p_intra"),
                    Contains("unknown placement 'p2p_intra': valid placements are collectives-intra"));

  const ProcessGrid grid(sp_only(4, 2, Placement::collectives_intra), 4, 0);
  CHECK_THROWS_WITH(grid.group("team"), Contains("unknown process group 'team': valid names are world, dp, tp, pp, "
                                                 "sp, sp.ulysses, sp.wallfacer, sp.team, sp.ring, dp_sp, pp.embedding"));
  CHECK_THROWS_WITH(grid.all_groups("ring"), Contains("unknown process group 'ring'"));
  CHECK_THROWS_WITH(grid.coord("cp"), Contains("unknown grid axis 'cp': valid axes are tp, sp, dp, pp"));
  CHECK_THROWS_WITH(grid.wallfacer_peers_of(4), Contains("rank 4 is outside the world of 4 ranks"));
  CHECK_THROWS_WITH(grid.wallfacer().kv_team_at_step(0, 1), Contains("ring step 1 is outside [0, G = 1)"));
  CHECK_THROWS_WITH(WallFacerLayout(12, 3, Placement::p2p_intra), Contains("valid C for sp = 12: 1, 2"));
  CHECK(wf::comm::valid_team_sizes(1) == std::vector<int>{1});
  CHECK(wf::comm::valid_team_sizes(12) == std::vector<int>{1, 2});
  CHECK(wf::comm::valid_team_sizes(36) == std::vector<int>{1, 2, 3, 6});
}

// ---- printing ---------------------------------------------------------------------------

TEST_CASE("to_table and to_json print the same layout", "[comm][grid]") {
  ParallelConfig config;
  config.dp = 2, config.sp = 8, config.C = 2, config.placement = Placement::p2p_intra;
  const ProcessGrid grid(config, 16, 3);

  const std::string table = grid.to_table();
  CHECK_THAT(table, Contains("process grid: 16 ranks = dp 2 x tp 1 x pp 1 x sp 8, order tp-sp-dp-pp"));
  CHECK_THAT(table, Contains("placement p2p-intra"));
  CHECK_THAT(table, Contains("sp.team         8 x 2    [0 2] [1 3] [4 6] [5 7] [8 10] [9 11] [12 14] [13 15]"));
  CHECK_THAT(table, Contains("init-send"));
  CHECK_THAT(table, Contains("ring-last"));

  const auto json = nlohmann::json::parse(grid.to_json());
  CHECK(json["world_size"] == 16);
  CHECK(json["config"]["placement"] == "p2p-intra");
  CHECK(json["wallfacer"]["ring_size"] == 2);
  for (std::string_view name : ProcessGrid::group_names()) {
    CHECK(json["groups"][std::string(name)].get<Groups>() == grid.all_groups(name));
  }
  REQUIRE(json["ranks"].size() == 16);
  for (int r = 0; r < 16; ++r) {
    const auto& entry = json["ranks"][static_cast<std::size_t>(r)];
    const auto peers = grid.wallfacer_peers_of(r);
    CHECK(entry["wallfacer"]["initial_send"] == peers.initial_send);
    CHECK(entry["wallfacer"]["initial_recv"] == peers.initial_recv);
    CHECK(entry["wallfacer"]["ring_next"] == peers.ring_next);
    CHECK(entry["wallfacer"]["ring_prev"] == peers.ring_prev);
    CHECK(entry["pp_next"].is_null());
  }
  CHECK(json["kv_team_at_step"][1] == std::vector<int>{2, 0});
}

TEST_CASE("pp4 tp2: the embedding groups pair the first and last stage; middle stages are alone", "[comm][grid]") {
  ParallelConfig config;
  config.tp = 2, config.pp = 4;
  const ProcessGrid grid(config, 8, 0);  // order tp-sp-dp-pp: rank = pp·2 + tp
  CHECK(grid.all_groups("pp.embedding") == Groups{{0, 6}, {1, 7}, {2}, {3}, {4}, {5}});
  CHECK(grid.group("pp.embedding") == std::vector<int>{0, 6});
  CHECK(ProcessGrid(config, 8, 7).group_rank("pp.embedding") == 1);
  CHECK(ProcessGrid(config, 8, 3).group("pp.embedding") == std::vector<int>{3});
  config.pp = 1, config.dp = 4;
  CHECK(ProcessGrid(config, 8, 5).group("pp.embedding") == std::vector<int>{5});
}
