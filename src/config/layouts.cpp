// config::candidate_layouts: the layouts a benchmark (or a scheduler) chooses among.
#include "wallfacer/config/run_config.h"

#include "wallfacer/core/error.h"

namespace wf::config {

std::vector<ParallelSection> candidate_layouts(int world_size, const ParallelSection& base) {
  WF_CHECK(world_size >= 1, "candidate_layouts: the world needs at least one rank, got {}", world_size);
  std::vector<ParallelSection> out;
  const auto add = [&](int dp, int tp, int sp, parallel::SpStrategy strategy, int C, int U = 1) {
    ParallelSection p = base;
    p.dp = dp;
    p.tp = tp;
    p.pp = 1;
    p.sp = sp;
    p.sp_strategy = strategy;
    p.C = C;
    p.U = U;
    out.push_back(p);
  };
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp != 0) continue;
    for (int sp = 1; sp <= world_size / tp; ++sp) {
      if ((world_size / tp) % sp != 0) continue;
      const int dp = world_size / (tp * sp);
      if (sp == 1) {  // no sequence parallelism: the strategy does not matter
        add(dp, tp, sp, parallel::SpStrategy::wallfacer, 1);
        continue;
      }
      for (int C : comm::valid_team_sizes(sp)) add(dp, tp, sp, parallel::SpStrategy::wallfacer, C);
      add(dp, tp, sp, parallel::SpStrategy::ring, 1);
      add(dp, tp, sp, parallel::SpStrategy::ulysses, 1);
      // The hybrid where both parts exist: U = 1 is wallfacer and U = sp ulysses, listed above.
      for (int U = 2; U < sp; ++U) {
        if (sp % U != 0) continue;
        for (int C : comm::valid_team_sizes(sp / U)) add(dp, tp, sp, parallel::SpStrategy::ulysses_wallfacer, C, U);
      }
    }
  }
  return out;
}

}  // namespace wf::config
