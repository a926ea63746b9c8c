// config::fitting_layouts and ranks_needed: what to suggest when a config's layout does not fit
// the world. Every layout offered passes validation_problems first, so a suggestion never fails on
// the next key (an sp that needs another C, a sequence length the new sp cannot split).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"

namespace wf::config {
namespace {

// The parallel keys `to` changes against `from`, as --set takes them, in a fixed order.
std::vector<std::string> changed_keys(const ParallelSection& from, const ParallelSection& to) {
  std::vector<std::string> keys;
  const auto add = [&](const char* key, auto before, auto after) {
    if (before != after) keys.push_back(fmt::format("parallel.{}={}", key, after));
  };
  add("dp", from.dp, to.dp);
  add("tp", from.tp, to.tp);
  add("pp", from.pp, to.pp);
  add("sp", from.sp, to.sp);
  if (from.sp_strategy != to.sp_strategy) {
    keys.push_back(fmt::format("parallel.sp_strategy={}", parallel::sp_strategy_name(to.sp_strategy)));
  }
  add("C", from.C, to.C);
  add("U", from.U, to.U);
  return keys;
}

// The layouts of one changed size (dp, tp, pp or sp) whose other three sizes divide the world.
std::vector<ParallelSection> one_size_changes(const ParallelSection& p, int world_size) {
  std::vector<ParallelSection> out;
  const std::array<int ParallelSection::*, 4> sizes = {&ParallelSection::dp, &ParallelSection::tp,
                                                       &ParallelSection::pp, &ParallelSection::sp};
  for (int ParallelSection::*size : sizes) {
    std::int64_t others = 1;  // capped past the world: the sizes come from users
    for (int ParallelSection::*other : sizes) {
      if (other != size) others = std::min<std::int64_t>(others * std::max(p.*other, 1), std::int64_t{world_size} + 1);
    }
    if (others > world_size || world_size % others != 0) continue;
    ParallelSection changed = p;
    changed.*size = static_cast<int>(world_size / others);
    if (!(changed == p)) out.push_back(changed);
  }
  return out;
}

}  // namespace

std::int64_t ranks_needed(const ParallelSection& p) {
  if (p.dp < 1 || p.tp < 1 || p.pp < 1 || p.sp < 1) return 0;
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  std::int64_t product = 1;
  for (const int size : {p.dp, p.tp, p.pp, p.sp}) product = std::min(product * size, kMax + 1);
  return product > kMax ? 0 : product;
}

std::vector<LayoutChange> fitting_layouts(const RunConfig& config, int world_size, ValidateScope scope,
                                          double machine_bytes, std::size_t limit, int ranks_per_machine) {
  if (world_size < 1 || limit == 0) return {};
  // One size changed first (the smallest edit), then the layouts of the world by fewest changed keys.
  std::vector<ParallelSection> candidates = one_size_changes(config.parallel, world_size);
  std::vector<ParallelSection> others = candidate_layouts(world_size, config.parallel);
  std::stable_sort(others.begin(), others.end(), [&](const ParallelSection& a, const ParallelSection& b) {
    return changed_keys(config.parallel, a).size() < changed_keys(config.parallel, b).size();
  });
  candidates.insert(candidates.end(), others.begin(), others.end());
  std::vector<LayoutChange> fitting;
  std::vector<ParallelSection> tried;
  for (const ParallelSection& layout : candidates) {
    if (fitting.size() == limit) break;
    if (std::find(tried.begin(), tried.end(), layout) != tried.end()) continue;
    tried.push_back(layout);
    RunConfig changed = config;
    changed.parallel = layout;
    if (validation_problems(changed, world_size, scope, machine_bytes, ranks_per_machine).empty()) {
      fitting.push_back({layout, changed_keys(config.parallel, layout)});
    }
  }
  return fitting;
}

std::string LayoutChange::set_flags() const {
  std::string flags;
  for (const std::string& key : keys) flags += (flags.empty() ? "--set " : " --set ") + key;
  return flags;
}

}  // namespace wf::config
