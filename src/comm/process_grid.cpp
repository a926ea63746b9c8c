#include "wallfacer/comm/process_grid.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "wallfacer/core/error.h"

namespace wf::comm {
namespace {

constexpr std::array<std::string_view, 4> kAxisNames = {"tp", "sp", "dp", "pp"};
constexpr int kTp = 0, kSp = 1, kDp = 2, kPp = 3;

// What a group kind varies: world axes, or the WallFacer sub-dimensions of the sp axis.
// ulysses and wallfacer split the sp axis into the hybrid's U × W; team_group, ring_pos and
// member split the WallFacer group again.
enum class Dim { tp, sp, dp, pp, ulysses, wallfacer, team_group, ring_pos, member };

constexpr std::array<std::string_view, 11> kGroupNames = {
    "world", "dp", "tp", "pp", "sp", "sp.ulysses", "sp.wallfacer", "sp.team", "sp.ring", "dp_sp", "pp.embedding"};
constexpr int kWorldGroup = 0;
// The first and the last pipeline stage of one (tp, sp, dp) coordinate, which both hold the tied
// token embedding and sum its gradient (Megatron's embedding group); a middle stage is alone.
constexpr int kEmbeddingGroup = 10;

std::string join_ints(const std::vector<int>& values, std::string_view separator) {
  return fmt::format("{}", fmt::join(values, separator));
}

std::string join_names(const auto& names) { return fmt::format("{}", fmt::join(names, ", ")); }

// a·b·c·d without overflow: the sizes come from users, so the product may not fit an int.
std::int64_t saturating_product(std::initializer_list<int> factors) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t product = 1;
  for (int f : factors) product = (product > kMax / f) ? kMax : product * f;
  return product;
}

// What would fit a world the four sizes do not multiply to: the sizes that cannot divide it, and
// each size that fits with the other three as they are ("" when neither helps).
std::string world_fit_hint(const std::array<std::pair<std::string_view, int>, 4>& sizes, int world_size) {
  std::vector<int> divisors;
  for (int d = 1; d <= world_size; ++d) {
    if (world_size % d == 0) divisors.push_back(d);
  }
  std::vector<std::string> too_big, not_dividing, fitting;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto& [name, value] = sizes[i];
    if (value > world_size) {
      too_big.push_back(fmt::format("{} = {}", name, value));
    } else if (world_size % value != 0) {
      not_dividing.push_back(fmt::format("{} = {}", name, value));
    }
    std::int64_t others = 1;  // capped past the world: the sizes come from users
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      if (j != i) others = std::min<std::int64_t>(others * sizes[j].second, std::int64_t{world_size} + 1);
    }
    if (others <= world_size && world_size % others == 0) fitting.push_back(fmt::format("{} = {}", name, world_size / others));
  }
  std::string hint;
  if (!too_big.empty()) hint += fmt::format("; {} exceeds the world", join_names(too_big));
  if (!not_dividing.empty()) hint += fmt::format("; {} does not divide the world", join_names(not_dividing));
  if (!too_big.empty() || !not_dividing.empty()) {
    hint += fmt::format(" (each size must be one of {}'s divisors: {})", world_size, join_ints(divisors, ", "));
  }
  if (!fitting.empty()) hint += fmt::format("; keeping the other sizes, {} would fit", fmt::join(fitting, " or "));
  return hint;
}

std::vector<std::string_view> split_order(std::string_view order) {
  std::vector<std::string_view> tokens;
  for (;;) {
    const auto dash = order.find('-');
    tokens.push_back(order.substr(0, dash));
    if (dash == std::string_view::npos) break;
    order.remove_prefix(dash + 1);
  }
  return tokens;
}

// Empty when `order` is a permutation of tp, sp, dp, pp; otherwise what is wrong with it.
std::string order_problem(std::string_view order) {
  std::vector<std::string> faults;
  std::array<int, 4> seen{};
  for (std::string_view token : split_order(order)) {
    const auto it = std::find(kAxisNames.begin(), kAxisNames.end(), token);
    if (it == kAxisNames.end()) {
      faults.push_back(fmt::format("'{}' is not one of them", token));
    } else if (++seen[static_cast<std::size_t>(it - kAxisNames.begin())] == 2) {
      faults.push_back(fmt::format("'{}' appears more than once", token));
    }
  }
  for (std::size_t a = 0; a < kAxisNames.size(); ++a) {
    if (seen[a] == 0) faults.push_back(fmt::format("'{}' is missing", kAxisNames[a]));
  }
  if (faults.empty()) return {};
  return fmt::format("order '{}' must list each of tp, sp, dp, pp exactly once, innermost first, joined by '-': {}",
                     order, fmt::join(faults, ", "));
}

std::vector<Dim> varying_dims(int kind, const int (&order)[4]) {
  switch (kind) {
    case kWorldGroup: {  // slowest axis first, so the members come out as 0, 1, 2, ...
      std::vector<Dim> dims;
      for (int k = 3; k >= 0; --k) dims.push_back(static_cast<Dim>(order[k]));
      return dims;
    }
    case 1: return {Dim::dp};
    case 2: return {Dim::tp};
    case 3: return {Dim::pp};
    case 4: return {Dim::sp};
    case 5: return {Dim::ulysses};
    case 6: return {Dim::wallfacer};
    case 7: return {Dim::member};
    case 8: return {Dim::ring_pos};
    default: return {Dim::dp, Dim::sp};  // dp_sp: sp fastest
  }
}

std::string peer_text(int peer) { return peer < 0 ? std::string("-") : std::to_string(peer); }

// Groups print as "[0 1 2 3]", wrapped so that no line runs much past 100 columns.
void append_wrapped_groups(std::string& out, const std::vector<std::vector<int>>& groups, std::size_t indent) {
  std::size_t column = indent;
  bool first = true;
  for (const auto& group : groups) {
    const std::string text = fmt::format("[{}]", fmt::join(group, " "));
    if (!first && column + 1 + text.size() > 100) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += text;
    column += text.size();
    first = false;
  }
  out += '\n';
}

}  // namespace

// ---- placement ---------------------------------------------------------------------------

std::string_view placement_name(Placement placement) {
  switch (placement) {
    case Placement::collectives_intra: return "collectives-intra";
    case Placement::p2p_intra: return "p2p-intra";
  }
  WF_FAIL("placement {} is not one of collectives-intra, p2p-intra", static_cast<int>(placement));
}

Placement parse_placement(std::string_view name) {
  if (name == "collectives-intra") return Placement::collectives_intra;
  if (name == "p2p-intra") return Placement::p2p_intra;
  WF_FAIL(
      "unknown placement '{}': valid placements are collectives-intra (team members adjacent), "
      "p2p-intra (sub-ring members adjacent)",
      name);
}

std::string placement_note(int sp, int C, int U) {
  U = std::max(U, 1);
  const int ranks = sp / U;  // the WallFacer group
  if (C <= 1 || ranks != C * C) return "";
  const std::string group = U > 1 ? fmt::format("the WallFacer group of sp / U = {} / {} = {}", sp, U, ranks)
                                  : fmt::format("sp = {}", sp);
  return fmt::format("parallel.placement: with {} = C x C ranks the sub-rings are single ranks (no ring steps), so "
                     "collectives-intra and p2p-intra place the ranks identically; the placement cannot matter",
                     group);
}

namespace {
// Every U dividing sp, ascending.
std::vector<int> divisors_of(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}
}  // namespace

std::vector<int> valid_team_sizes(int sp) {
  std::vector<int> sizes;
  for (int c = 1; sp >= 1 && static_cast<std::int64_t>(c) * c <= sp; ++c) {
    if (sp % (c * c) == 0) sizes.push_back(c);
  }
  return sizes;
}

// ---- WallFacer sub-layout ------------------------------------------------------------------

WallFacerLayout::WallFacerLayout(int P, int C, Placement placement) : P_(P), C_(C), G_(0), placement_(placement) {
  WF_CHECK(P >= 1, "the sp group needs at least 1 rank (got sp = {})", P);
  WF_CHECK(C >= 1 && static_cast<std::int64_t>(C) * C <= P && P % (C * C) == 0,
           "C = {} does not fit sp = {}: WallFacer needs C >= 1 with C*C dividing sp; valid C for sp = {}: {}", C, P, P,
           join_ints(valid_team_sizes(P), ", "));
  (void)placement_name(placement);  // rejects values outside the enum
  G_ = P / (C * C);
}

void WallFacerLayout::check_index(int sp_index) const {
  WF_CHECK(sp_index >= 0 && sp_index < P_, "sp index {} is outside the sp group of {} ranks", sp_index, P_);
}

SpPosition WallFacerLayout::position(int sp_index) const {
  check_index(sp_index);
  if (placement_ == Placement::collectives_intra) {  // physical = (g·G + j)·C + m
    const int team = sp_index / C_;
    return {team / G_, team % G_, sp_index % C_};
  }
  // p2p-intra: physical = (g·C + m)·G + j
  return {sp_index / (G_ * C_), sp_index % G_, (sp_index / G_) % C_};
}

int WallFacerLayout::sp_index(const SpPosition& p) const {
  WF_CHECK(
      p.team_group >= 0 && p.team_group < C_ && p.ring_pos >= 0 && p.ring_pos < G_ && p.member >= 0 && p.member < C_,
      "WallFacer position (team group {}, ring position {}, member {}) is outside C = {}, G = {}", p.team_group,
      p.ring_pos, p.member, C_, G_);
  if (placement_ == Placement::collectives_intra) return (p.team_group * G_ + p.ring_pos) * C_ + p.member;
  return (p.team_group * C_ + p.member) * G_ + p.ring_pos;
}

int WallFacerLayout::team(int sp_index) const {
  const SpPosition p = position(sp_index);
  return p.team_group * G_ + p.ring_pos;
}

int WallFacerLayout::logical_index(int sp_index) const { return team(sp_index) * C_ + position(sp_index).member; }

int WallFacerLayout::initial_send(int sp_index) const {
  const SpPosition p = position(sp_index);
  const int t = p.team_group * G_ + p.ring_pos;
  // Target team m·G + t/C lies in team group m at position t/C (t/C < T/C = G).
  return this->sp_index({p.member, t / C_, t % C_});
}

int WallFacerLayout::initial_recv(int sp_index) const {
  const SpPosition p = position(sp_index);
  const int source_team = p.ring_pos * C_ + p.member;
  return this->sp_index({source_team / G_, source_team % G_, p.team_group});
}

int WallFacerLayout::ring_next(int sp_index) const {
  SpPosition p = position(sp_index);
  p.ring_pos = (p.ring_pos + 1) % G_;
  return this->sp_index(p);
}

int WallFacerLayout::ring_prev(int sp_index) const {
  SpPosition p = position(sp_index);
  p.ring_pos = (p.ring_pos + G_ - 1) % G_;
  return this->sp_index(p);
}

int WallFacerLayout::kv_team_at_step(int sp_index, int step) const {
  WF_CHECK(step >= 0 && step < G_, "ring step {} is outside [0, G = {})", step, G_);
  const SpPosition p = position(sp_index);
  return ((p.ring_pos - step + G_) % G_) * C_ + p.member;
}

// ---- process grid --------------------------------------------------------------------------

void ProcessGrid::validate(const ParallelConfig& config, int world_size) {
  std::vector<std::string> problems;
  const std::array<std::pair<std::string_view, int>, 4> sizes = {
      {{"dp", config.dp}, {"tp", config.tp}, {"pp", config.pp}, {"sp", config.sp}}};
  bool sizes_ok = true;
  for (const auto& [name, value] : sizes) {
    if (value < 1) {
      problems.push_back(fmt::format("{} = {} must be at least 1", name, value));
      sizes_ok = false;
    }
  }
  if (world_size < 1) problems.push_back(fmt::format("the world size {} must be at least 1", world_size));
  if (sizes_ok && world_size >= 1) {
    const std::int64_t product = saturating_product({config.dp, config.tp, config.pp, config.sp});
    if (product != world_size) {
      const std::string product_text = product == std::numeric_limits<std::int64_t>::max()
                                           ? std::string("more than 9.2e18")
                                           : std::to_string(product);
      problems.push_back(
          fmt::format("dp {} x tp {} x pp {} x sp {} = {} ranks, but the world has {}: the four sizes must multiply to "
                      "the world size{}",
                      config.dp, config.tp, config.pp, config.sp, product_text, world_size,
                      world_fit_hint(sizes, world_size)));
    }
  }
  const bool u_fits = config.sp >= 1 && config.U >= 1 && config.U <= config.sp && config.sp % config.U == 0;
  if (config.sp >= 1 && !u_fits) {
    problems.push_back(fmt::format(
        "U = {} does not divide sp = {}: the Ulysses degree of ulysses-wallfacer must be a divisor of sp (the sp group "
        "is U Ulysses ranks times sp/U WallFacer ranks); valid U for sp = {}: {}",
        config.U, config.sp, config.sp, join_ints(divisors_of(config.sp), ", ")));
  }
  if (u_fits) {
    const int W = config.sp / config.U;  // the WallFacer group C² must divide
    const bool fits =
        config.C >= 1 && static_cast<std::int64_t>(config.C) * config.C <= W && W % (config.C * config.C) == 0;
    if (!fits && config.U == 1) {
      problems.push_back(fmt::format(
          "C = {} does not fit sp = {}: WallFacer needs C >= 1 with C*C dividing sp; valid C for sp = {}: {}", config.C,
          config.sp, config.sp, join_ints(valid_team_sizes(config.sp), ", ")));
    } else if (!fits) {
      problems.push_back(fmt::format(
          "C = {} does not fit sp / U = {} / {} = {}: WallFacer runs over groups of sp/U ranks and needs C >= 1 with "
          "C*C dividing sp/U; valid C for sp/U = {}: {} (or choose another U)",
          config.C, config.sp, config.U, W, W, join_ints(valid_team_sizes(W), ", ")));
    }
  }
  if (std::string problem = order_problem(config.order); !problem.empty()) problems.push_back(std::move(problem));
  if (config.placement != Placement::collectives_intra && config.placement != Placement::p2p_intra) {
    problems.push_back(
        fmt::format("placement {} is not one of collectives-intra, p2p-intra", static_cast<int>(config.placement)));
  }
  WF_CHECK(problems.empty(), "invalid parallel layout for a world of {} ranks: {}", world_size,
           fmt::join(problems, "; "));
}

namespace {
ParallelConfig validated(ParallelConfig config, int world_size) {
  ProcessGrid::validate(config, world_size);
  return config;
}
}  // namespace

ProcessGrid::ProcessGrid(ParallelConfig config, int world_size, int rank)
    : config_(validated(std::move(config), world_size)),
      world_size_(world_size),
      rank_(rank),
      layout_(config_.sp / config_.U, config_.C, config_.placement),
      size_{config_.tp, config_.sp, config_.dp, config_.pp} {
  check_rank(rank);
  const auto tokens = split_order(config_.order);
  int stride = 1;
  for (int k = 0; k < 4; ++k) {
    const int axis = static_cast<int>(std::find(kAxisNames.begin(), kAxisNames.end(), tokens[k]) - kAxisNames.begin());
    order_[k] = axis;
    stride_[axis] = stride;
    stride *= size_[axis];
  }
  for (int kind = 0; kind < static_cast<int>(kGroupNames.size()); ++kind) {
    my_groups_.push_back(members(kind, rank_));
    const auto& group = my_groups_.back();
    my_group_ranks_.push_back(static_cast<int>(std::find(group.begin(), group.end(), rank_) - group.begin()));
  }
}

void ProcessGrid::check_rank(int rank) const {
  WF_CHECK(rank >= 0 && rank < world_size_, "rank {} is outside the world of {} ranks (valid: 0..{})", rank,
           world_size_, world_size_ - 1);
}

const std::vector<std::string_view>& ProcessGrid::group_names() {
  static const std::vector<std::string_view> names(kGroupNames.begin(), kGroupNames.end());
  return names;
}

int ProcessGrid::group_kind(std::string_view name) const {
  const auto it = std::find(kGroupNames.begin(), kGroupNames.end(), name);
  WF_CHECK(it != kGroupNames.end(), "unknown process group '{}': valid names are {}", name, join_names(kGroupNames));
  return static_cast<int>(it - kGroupNames.begin());
}

ProcessGrid::Coords ProcessGrid::coords_of(int rank) const {
  check_rank(rank);
  Coords c{};
  for (int axis = 0; axis < 4; ++axis) c.world[axis] = (rank / stride_[axis]) % size_[axis];
  return c;
}

int ProcessGrid::rank_of(const Coords& c) const {
  int rank = 0;
  for (int axis = 0; axis < 4; ++axis) rank += c.world[axis] * stride_[axis];
  return rank;
}

// Walks the dims the kind varies as a mixed-radix counter (last dim fastest) while every other
// coordinate keeps the value it has at `rank`: the one rule every group comes from.
std::vector<int> ProcessGrid::members(int kind, int rank) const {
  const Coords base = coords_of(rank);
  if (kind == kEmbeddingGroup) {
    const int last = size_[kPp] - 1, stage = base.world[kPp];
    if (stage != 0 && stage != last) return {rank};
    Coords first_stage = base, last_stage = base;
    first_stage.world[kPp] = 0;
    last_stage.world[kPp] = last;
    return last == 0 ? std::vector<int>{rank} : std::vector<int>{rank_of(first_stage), rank_of(last_stage)};
  }
  const int base_u = ulysses_index(base.world[kSp]), base_w = wallfacer_index(base.world[kSp]);
  const SpPosition base_position = layout_.position(base_w);
  const std::vector<Dim> dims = varying_dims(kind, order_);
  std::vector<int> extent;
  int total = 1;
  for (Dim dim : dims) {
    switch (dim) {
      case Dim::ulysses: extent.push_back(config_.U); break;
      case Dim::wallfacer: extent.push_back(layout_.ranks()); break;
      case Dim::team_group:
      case Dim::member: extent.push_back(layout_.team_size()); break;
      case Dim::ring_pos: extent.push_back(layout_.ring_size()); break;
      default: extent.push_back(size_[static_cast<int>(dim)]);
    }
    total *= extent.back();
  }
  std::vector<int> result;
  result.reserve(static_cast<std::size_t>(total));
  for (int n = 0; n < total; ++n) {
    Coords c = base;
    SpPosition p = base_position;
    int u = base_u, w = base_w;
    bool sub_dims = false, positions = false;
    int rest = n;
    for (std::size_t k = dims.size(); k-- > 0;) {
      const int value = rest % extent[k];
      rest /= extent[k];
      switch (dims[k]) {
        case Dim::ulysses: u = value; break;
        case Dim::wallfacer: w = value; break;
        case Dim::team_group: p.team_group = value, positions = true; break;
        case Dim::ring_pos: p.ring_pos = value, positions = true; break;
        case Dim::member: p.member = value, positions = true; break;
        default: c.world[static_cast<int>(dims[k])] = value; continue;
      }
      sub_dims = true;
    }
    if (positions) w = layout_.sp_index(p);
    if (sub_dims) c.world[kSp] = sp_index_of(u, w);
    result.push_back(rank_of(c));
  }
  return result;
}

const std::vector<int>& ProcessGrid::group(std::string_view name) const {
  return my_groups_[static_cast<std::size_t>(group_kind(name))];
}

int ProcessGrid::group_rank(std::string_view name) const {
  return my_group_ranks_[static_cast<std::size_t>(group_kind(name))];
}

int ProcessGrid::group_size(std::string_view name) const { return static_cast<int>(group(name).size()); }

std::vector<int> ProcessGrid::group_of(std::string_view name, int rank) const {
  return members(group_kind(name), rank);
}

std::vector<std::vector<int>> ProcessGrid::all_groups(std::string_view name) const {
  const int kind = group_kind(name);
  std::vector<std::vector<int>> groups;
  std::vector<bool> placed(static_cast<std::size_t>(world_size_), false);
  for (int r = 0; r < world_size_; ++r) {
    if (placed[static_cast<std::size_t>(r)]) continue;
    groups.push_back(members(kind, r));
    for (int member : groups.back()) placed[static_cast<std::size_t>(member)] = true;
  }
  return groups;
}

int ProcessGrid::coord_of(std::string_view axis, int rank) const {
  const auto it = std::find(kAxisNames.begin(), kAxisNames.end(), axis);
  WF_CHECK(it != kAxisNames.end(), "unknown grid axis '{}': valid axes are {}", axis, join_names(kAxisNames));
  return coords_of(rank).world[it - kAxisNames.begin()];
}

int ProcessGrid::ulysses_index(int sp_index) const {
  WF_CHECK(sp_index >= 0 && sp_index < config_.sp, "sp index {} is outside the sp group of {} ranks", sp_index,
           config_.sp);
  return config_.ulysses_inner ? sp_index % config_.U : sp_index / layout_.ranks();
}

int ProcessGrid::wallfacer_index(int sp_index) const {
  WF_CHECK(sp_index >= 0 && sp_index < config_.sp, "sp index {} is outside the sp group of {} ranks", sp_index,
           config_.sp);
  return config_.ulysses_inner ? sp_index / config_.U : sp_index % layout_.ranks();
}

int ProcessGrid::sp_index_of(int ulysses_index, int wallfacer_index) const {
  WF_CHECK(ulysses_index >= 0 && ulysses_index < config_.U && wallfacer_index >= 0 &&
               wallfacer_index < layout_.ranks(),
           "Ulysses index {} / WallFacer index {} is outside U = {}, sp/U = {}", ulysses_index, wallfacer_index,
           config_.U, layout_.ranks());
  return config_.ulysses_inner ? wallfacer_index * config_.U + ulysses_index
                               : ulysses_index * layout_.ranks() + wallfacer_index;
}

int ProcessGrid::sp_logical_index(int sp_index) const {
  return layout_.logical_index(wallfacer_index(sp_index)) * config_.U + ulysses_index(sp_index);
}

int ProcessGrid::sp_index_to_rank(int rank, int sp_index) const {
  Coords c = coords_of(rank);
  c.world[kSp] = sp_index;
  return rank_of(c);
}

WallFacerPeers ProcessGrid::wallfacer_peers_of(int rank) const {
  const int sp = coords_of(rank).world[kSp], u = ulysses_index(sp), s = wallfacer_index(sp);
  const SpPosition p = layout_.position(s);
  // The peers share the rank's Ulysses index: they are in its WallFacer group.
  const auto peer = [&](int w) { return sp_index_to_rank(rank, sp_index_of(u, w)); };
  return {peer(layout_.initial_send(s)),
          peer(layout_.initial_recv(s)),
          peer(layout_.ring_next(s)),
          peer(layout_.ring_prev(s)),
          layout_.team(s),
          p.member,
          p.team_group,
          p.ring_pos};
}

int ProcessGrid::pp_neighbor_of(int rank, int step) const {
  Coords c = coords_of(rank);
  c.world[kPp] += step;
  if (c.world[kPp] < 0 || c.world[kPp] >= size_[kPp]) return -1;
  return rank_of(c);
}

// ---- printing ------------------------------------------------------------------------------

std::string ProcessGrid::to_table() const {
  const ParallelConfig& cfg = config_;
  std::string out;
  std::vector<std::string> strides;  // axes of size 1 are always 0: left out of the formula
  for (int k = 0; k < 4; ++k) {
    const int axis = order_[k];
    if (size_[axis] == 1) continue;
    strides.push_back(stride_[axis] == 1 ? std::string(kAxisNames[axis])
                                         : fmt::format("{}*{}", stride_[axis], kAxisNames[axis]));
  }
  if (strides.empty()) strides.emplace_back("0");
  out += fmt::format("process grid: {} ranks = dp {} x tp {} x pp {} x sp {}, order {} (rank = {})\n", world_size_,
                     cfg.dp, cfg.tp, cfg.pp, cfg.sp, cfg.order, fmt::join(strides, " + "));
  // With U > 1 the WallFacer line describes each WallFacer group of sp/U ranks.
  const std::string group = cfg.U > 1 ? fmt::format("WallFacer group of sp/U = {} ranks", layout_.ranks())
                                      : std::string("sp group");
  out += fmt::format(
      "wallfacer: C = {} ({} teams of {} per {}), G = {} (C*C = {} sub-rings of {} rank{}), placement {}\n", cfg.C,
      layout_.num_teams(), cfg.C, group, layout_.ring_size(), cfg.C * cfg.C, layout_.ring_size(),
      layout_.ring_size() == 1 ? "" : "s", placement_name(cfg.placement));
  if (cfg.U > 1) {
    out += fmt::format("ulysses: U = {} (all-to-all over sp.ulysses), {} ranks adjacent (sp index = {})\n", cfg.U,
                       cfg.ulysses_inner ? "Ulysses" : "WallFacer",
                       cfg.ulysses_inner ? fmt::format("w*{} + u", cfg.U) : fmt::format("u*{} + w", layout_.ranks()));
  }
  out += '\n';

  out += "groups (world ranks in group-rank order):\n";
  for (std::string_view name : kGroupNames) {
    const auto groups = all_groups(name);
    const std::string head = fmt::format("  {:<12} {:>4} x {:<4} ", name, groups.size(), groups.front().size());
    out += head;
    append_wrapped_groups(out, groups, head.size());
  }

  out +=
      "\nranks (team, member, tgroup = team group, pos = ring position: the logical WallFacer position in the sp "
      "group):\n";
  out +=
      fmt::format("  {:>5} {:>4} {:>4} {:>4} {:>4} | {:>4} {:>6} {:>6} {:>3} | {:>9} {:>9} {:>9} {:>9} | {:>7} {:>7}\n",
                  "rank", "tp", "sp", "dp", "pp", "team", "member", "tgroup", "pos", "init-send", "init-recv",
                  "ring-next", "ring-last", "pp-next", "pp-prev");
  for (int r = 0; r < world_size_; ++r) {
    const Coords c = coords_of(r);
    const WallFacerPeers w = wallfacer_peers_of(r);
    out += fmt::format(
        "  {:>5} {:>4} {:>4} {:>4} {:>4} | {:>4} {:>6} {:>6} {:>3} | {:>9} {:>9} {:>9} {:>9} | {:>7} {:>7}\n", r,
        c.world[kTp], c.world[kSp], c.world[kDp], c.world[kPp], w.team, w.member, w.team_group, w.ring_pos,
        w.initial_send, w.initial_recv, w.ring_next, w.ring_prev, peer_text(pp_neighbor_of(r, +1)),
        peer_text(pp_neighbor_of(r, -1)));
  }

  out += cfg.U > 1 ? "\nK/V held by each WallFacer index at each ring step (team number; the same in every WallFacer "
                     "group):\n"
                   : "\nK/V held by each sp index at each ring step (team number; the same in every sp group):\n";
  out += fmt::format("  {:>8} {:>9}", cfg.U > 1 ? "wf index" : "sp index", "team.mbr");
  for (int step = 0; step < layout_.ring_size(); ++step) out += fmt::format(" {:>6}", fmt::format("step{}", step));
  out += '\n';
  for (int s = 0; s < layout_.ranks(); ++s) {
    out += fmt::format("  {:>8} {:>9}", s, fmt::format("{}.{}", layout_.team(s), layout_.position(s).member));
    for (int step = 0; step < layout_.ring_size(); ++step)
      out += fmt::format(" {:>6}", layout_.kv_team_at_step(s, step));
    out += '\n';
  }
  return out;
}

std::string ProcessGrid::to_json(int indent) const {
  using Json = nlohmann::ordered_json;
  Json doc;
  doc["world_size"] = world_size_;
  doc["config"] = {{"dp", config_.dp},
                   {"tp", config_.tp},
                   {"pp", config_.pp},
                   {"sp", config_.sp},
                   {"order", config_.order},
                   {"C", config_.C},
                   {"placement", placement_name(config_.placement)},
                   {"U", config_.U},
                   {"ulysses_inner", config_.ulysses_inner}};
  doc["wallfacer"] = {{"teams", layout_.num_teams()},
                      {"team_size", layout_.team_size()},
                      {"ring_size", layout_.ring_size()},
                      {"sub_rings", config_.C * config_.C},
                      {"group_size", layout_.ranks()}};  // sp/U ranks: the WallFacer group
  Json strides = Json::object();
  for (int k = 0; k < 4; ++k) strides[std::string(kAxisNames[order_[k]])] = stride_[order_[k]];
  doc["strides"] = strides;
  Json groups = Json::object();
  for (std::string_view name : kGroupNames) groups[std::string(name)] = all_groups(name);
  doc["groups"] = groups;
  Json ranks = Json::array();
  for (int r = 0; r < world_size_; ++r) {
    const Coords c = coords_of(r);
    const WallFacerPeers w = wallfacer_peers_of(r);
    Json entry;
    entry["rank"] = r;
    entry["coords"] = {{"tp", c.world[kTp]}, {"sp", c.world[kSp]}, {"dp", c.world[kDp]}, {"pp", c.world[kPp]}};
    entry["ulysses_index"] = ulysses_index(c.world[kSp]);
    entry["wallfacer_index"] = wallfacer_index(c.world[kSp]);
    entry["wallfacer"] = {{"team", w.team},
                          {"member", w.member},
                          {"team_group", w.team_group},
                          {"ring_pos", w.ring_pos},
                          {"initial_send", w.initial_send},
                          {"initial_recv", w.initial_recv},
                          {"ring_next", w.ring_next},
                          {"ring_prev", w.ring_prev}};
    const int next = pp_neighbor_of(r, +1), prev = pp_neighbor_of(r, -1);
    entry["pp_next"] = next < 0 ? Json() : Json(next);
    entry["pp_prev"] = prev < 0 ? Json() : Json(prev);
    ranks.push_back(entry);
  }
  doc["ranks"] = ranks;
  Json schedule = Json::array();  // per sp index: the team whose K/V it holds at each step
  for (int s = 0; s < layout_.ranks(); ++s) {
    std::vector<int> teams;
    for (int step = 0; step < layout_.ring_size(); ++step) teams.push_back(layout_.kv_team_at_step(s, step));
    schedule.push_back(teams);
  }
  doc["kv_team_at_step"] = schedule;
  return doc.dump(indent);
}

}  // namespace wf::comm
