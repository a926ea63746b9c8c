#pragma once
// The process grid: how the world's ranks split into data, tensor, pipeline and sequence
// parallel groups, and how each sequence-parallel group splits again into WallFacer teams and
// sub-rings. Pure arithmetic, no MPI: every group is derived from ONE decomposition of the
// world rank, so every rank computes the same groups without talking to the others, and the
// communicators built later only have to call MPI_Comm_split with these lists.
// docs/process-grid.md explains the layout with pictures.
#include <string>
#include <string_view>
#include <vector>

namespace wf::comm {

// Where the WallFacer sub-dimensions sit inside the sp group (paper §4.3): which traffic gets
// the adjacent (usually intra-node) ranks.
enum class Placement {
  collectives_intra,  // team members adjacent: the all-gathers / reduce-scatters stay local
  p2p_intra,          // sub-ring members adjacent: the ring P2P stays local
};

// "collectives-intra" / "p2p-intra".
std::string_view placement_name(Placement placement);
// The inverse of placement_name; throws wf::Error naming the valid values.
Placement parse_placement(std::string_view name);
// A remark when the placement cannot matter for sp ranks in teams of C: with sp = C·C (C > 1) every
// sub-ring is one rank, so both placements put the ranks in the same places; "" otherwise.
std::string placement_note(int sp, int C, int U = 1);  // U: the hybrid's Ulysses degree (its WallFacer group is sp/U)

struct ParallelConfig {
  int dp = 1, tp = 1, pp = 1, sp = 1;
  // Rank decomposition, innermost (fastest varying) first: a permutation of tp, sp, dp, pp.
  // The default puts tensor-parallel ranks next to each other so they share a node.
  std::string order = "tp-sp-dp-pp";
  int C = 1;  // WallFacer team size; C = 1 is plain ring attention. C² must divide sp / U.
  Placement placement = Placement::collectives_intra;
  // Ulysses degree of the ulysses-wallfacer hybrid: the sp group is U Ulysses ranks (an
  // all-to-all group, "sp.ulysses") times W = sp/U WallFacer ranks ("sp.wallfacer", which the
  // teams and sub-rings split). U = 1 (every other strategy) makes sp.wallfacer the sp group.
  int U = 1;
  // Which of the two sits on adjacent sp indices: the Ulysses ranks (sp index = w·U + u, USP's
  // default: the all-to-all stays on a node) or the WallFacer ranks (sp index = u·W + w).
  bool ulysses_inner = true;
};

// Every team size C ≥ 1 with C² dividing sp, ascending (the scheduler's search space).
std::vector<int> valid_team_sizes(int sp);

// Logical position of a rank inside its sp group: team t = team_group·G + ring_pos, and the
// rank's logical sp index is t·C + member (wallfacer-algorithm.md, "Layout").
struct SpPosition {
  int team_group = 0;  // g in [0, C)
  int ring_pos = 0;    // j in [0, G): position on the sub-ring
  int member = 0;      // m in [0, C): position inside the team
};

// The WallFacer sub-layout of one sp group of P ranks, in sp indices (a rank's position in
// the `sp` group, 0..P-1). The placement maps the logical index (g·G + j)·C + m to the
// physical sp index: collectives-intra is the identity, p2p-intra is (g·C + m)·G + j.
class WallFacerLayout {
 public:
  // Throws wf::Error unless C ≥ 1 and C² divides P.
  WallFacerLayout(int P, int C, Placement placement);

  int ranks() const { return P_; }           // P
  int team_size() const { return C_; }       // C
  int ring_size() const { return G_; }       // G = P / C²: ranks per sub-ring, teams per team group
  int num_teams() const { return P_ / C_; }  // T = P / C
  Placement placement() const { return placement_; }

  SpPosition position(int sp_index) const;         // physical -> logical
  int sp_index(const SpPosition& position) const;  // logical -> physical
  int team(int sp_index) const;                    // t = g·G + j
  // (g·G + j)·C + m: the order the data loader and the attention math think in.
  int logical_index(int sp_index) const;

  // The four peers of the WallFacer forward, as sp indices.
  int initial_send(int sp_index) const;  // Algorithm 2: team m·G + t/C, member t % C
  int initial_recv(int sp_index) const;  // its inverse: team j·C + m, member g
  int ring_next(int sp_index) const;     // Algorithm 3: same g and m, position j + 1 mod G
  int ring_prev(int sp_index) const;     // same g and m, position j − 1 mod G

  // The team whose K/V the rank holds at ring step `step` in [0, G) (step 0 = right after the
  // initial dispatch): ((j − step) mod G)·C + m.
  int kv_team_at_step(int sp_index, int step) const;

 private:
  void check_index(int sp_index) const;
  int P_, C_, G_;
  Placement placement_;
};

// One rank's WallFacer peers as WORLD ranks, plus its logical position.
struct WallFacerPeers {
  int initial_send, initial_recv, ring_next, ring_prev;
  int team, member, team_group, ring_pos;
};

class ProcessGrid {
 public:
  // Checks the whole configuration against the world size and throws ONE wf::Error listing
  // every problem found. The text depends only on (config, world_size), so a misconfigured
  // distributed run fails on every rank with the same message.
  static void validate(const ParallelConfig& config, int world_size);

  // Validates, then decomposes `rank`. Throws wf::Error when rank is outside [0, world_size).
  ProcessGrid(ParallelConfig config, int world_size, int rank);

  const ParallelConfig& config() const { return config_; }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  // The WallFacer layout of one WallFacer group (sp/U ranks; the sp group when U = 1): its
  // indices are wallfacer indices, a rank's position in "sp.wallfacer".
  const WallFacerLayout& wallfacer() const { return layout_; }

  // The sp group as U Ulysses ranks × W = sp/U WallFacer ranks (ParallelConfig::U,
  // ulysses_inner). All take and return indices inside one sp group.
  int ulysses_index(int sp_index) const;    // u: position in "sp.ulysses"
  int wallfacer_index(int sp_index) const;  // w: position in "sp.wallfacer"
  int sp_index_of(int ulysses_index, int wallfacer_index) const;
  // The rank's logical sp index, the one the sequence layout is cut by (sequence_layout.h):
  // l·U + u with l = wallfacer().logical_index(w). With U = 1 it is WallFacer's logical index.
  int sp_logical_index(int sp_index) const;

  // The group kinds, in the order printed: world, dp, tp, pp, sp, sp.ulysses (the hybrid's
  // all-to-all group of U ranks), sp.wallfacer (its WallFacer group of sp/U ranks: the dispatch
  // group; the sp group when U = 1), sp.team, sp.ring (inside sp.wallfacer), dp_sp, pp.embedding
  // (the first and last pipeline stage of each tp, sp, dp coordinate).
  static const std::vector<std::string_view>& group_names();

  // This rank's group of that kind: world ranks, in group-rank order. An unknown name throws
  // wf::Error listing the valid ones.
  const std::vector<int>& group(std::string_view name) const;
  int group_rank(std::string_view name) const;  // this rank's index in group(name)
  int group_size(std::string_view name) const;
  // The group of that kind holding `rank` (any rank of the world).
  std::vector<int> group_of(std::string_view name, int rank) const;
  // Every group of that kind, ordered by the lowest world rank each contains.
  std::vector<std::vector<int>> all_groups(std::string_view name) const;

  // Coordinate along "tp", "sp", "dp" or "pp" (sp: the physical sp index).
  int coord(std::string_view axis) const { return coord_of(axis, rank_); }
  int coord_of(std::string_view axis, int rank) const;

  WallFacerPeers wallfacer_peers() const { return wallfacer_peers_of(rank_); }
  WallFacerPeers wallfacer_peers_of(int rank) const;

  // Pipeline neighbours (same dp, tp, sp coordinates); -1 past the first / last stage.
  int pp_next() const { return pp_neighbor_of(rank_, +1); }
  int pp_prev() const { return pp_neighbor_of(rank_, -1); }

  // Human-readable layout: every group's rank lists, every rank's coordinates and WallFacer
  // peers, and which team's K/V each sp index holds at each ring step.
  std::string to_table() const;
  // The same facts as one JSON document (nlohmann::ordered_json::dump(indent)).
  std::string to_json(int indent = 2) const;

 private:
  // World axes are indexed tp = 0, sp = 1, dp = 2, pp = 3 throughout.
  struct Coords {
    int world[4];
  };
  Coords coords_of(int rank) const;
  int rank_of(const Coords& coords) const;
  int group_kind(std::string_view name) const;
  std::vector<int> members(int kind, int rank) const;
  int sp_index_to_rank(int rank, int sp_index) const;
  int pp_neighbor_of(int rank, int step) const;
  void check_rank(int rank) const;

  ParallelConfig config_;
  int world_size_, rank_;
  WallFacerLayout layout_;
  int size_[4];                              // per world axis
  int stride_[4];                            // per world axis
  int order_[4];                             // world axes, innermost first
  std::vector<std::vector<int>> my_groups_;  // per group kind
  std::vector<int> my_group_ranks_;          // per group kind
};

}  // namespace wf::comm
