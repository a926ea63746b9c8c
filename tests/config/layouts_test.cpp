// config::candidate_layouts: every dp × tp × sp of a world, with the sp strategies and team sizes.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "wallfacer/config/run_config.h"

namespace wf::config {
namespace {

// "dp.tp.sp.strategy.C" of each layout, in order (".U" after it for the hybrid).
std::vector<std::string> names(const std::vector<ParallelSection>& layouts) {
  std::vector<std::string> out;
  for (const ParallelSection& p : layouts) {
    out.push_back(fmt::format("{}.{}.{}.{}.{}", p.dp, p.tp, p.sp, parallel::sp_strategy_name(p.sp_strategy), p.C) +
                  (p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? fmt::format(".U{}", p.U) : ""));
  }
  return out;
}

TEST_CASE("candidate layouts of 4 ranks: by tp then sp, every strategy and team size for sp > 1", "[config]") {
  ParallelSection base;
  base.order = "sp-tp-dp-pp";
  base.pp = 2;
  const std::vector<ParallelSection> layouts = candidate_layouts(4, base);
  CHECK(names(layouts) == std::vector<std::string>{
                              "4.1.1.wallfacer.1", "2.1.2.wallfacer.1", "2.1.2.ring.1", "2.1.2.ulysses.1",
                              "1.1.4.wallfacer.1", "1.1.4.wallfacer.2", "1.1.4.ring.1", "1.1.4.ulysses.1",
                              "1.1.4.ulysses-wallfacer.1.U2", "2.2.1.wallfacer.1", "1.2.2.wallfacer.1", "1.2.2.ring.1",
                              "1.2.2.ulysses.1",
                              "1.4.1.wallfacer.1"});
  for (const ParallelSection& p : layouts) {
    CHECK(p.pp == 1);
    CHECK(p.order == base.order);  // the rest is the base's
    CHECK(p.U == (p.sp_strategy == parallel::SpStrategy::ulysses_wallfacer ? 2 : 1));
  }
}

TEST_CASE("candidate layouts of 16 ranks: the hybrid for every U strictly between 1 and sp and every C", "[config]") {
  ParallelSection base;
  base.ulysses_inner = false;
  std::vector<std::string> hybrids;
  for (const ParallelSection& p : candidate_layouts(16, base)) {
    if (p.sp_strategy != parallel::SpStrategy::ulysses_wallfacer) continue;
    CHECK_FALSE(p.ulysses_inner);  // the base's
    hybrids.push_back(names({p}).front());
  }
  CHECK(hybrids == std::vector<std::string>{
                       "4.1.4.ulysses-wallfacer.1.U2",                                  // tp 1, sp 4
                       "2.1.8.ulysses-wallfacer.1.U2", "2.1.8.ulysses-wallfacer.2.U2",  // sp 8
                       "2.1.8.ulysses-wallfacer.1.U4",
                       "1.1.16.ulysses-wallfacer.1.U2", "1.1.16.ulysses-wallfacer.2.U2",  // sp 16
                       "1.1.16.ulysses-wallfacer.1.U4", "1.1.16.ulysses-wallfacer.2.U4",
                       "1.1.16.ulysses-wallfacer.1.U8",
                       "2.2.4.ulysses-wallfacer.1.U2",                                  // tp 2
                       "1.2.8.ulysses-wallfacer.1.U2", "1.2.8.ulysses-wallfacer.2.U2",
                       "1.2.8.ulysses-wallfacer.1.U4",
                       "1.4.4.ulysses-wallfacer.1.U2"});                                // tp 4
}

TEST_CASE("candidate layouts: one rank, a prime world, and no duplicates at 16", "[config]") {
  CHECK(names(candidate_layouts(1)) == std::vector<std::string>{"1.1.1.wallfacer.1"});
  CHECK(names(candidate_layouts(3)) == std::vector<std::string>{"3.1.1.wallfacer.1", "1.1.3.wallfacer.1",
                                                                "1.1.3.ring.1", "1.1.3.ulysses.1",
                                                                "1.3.1.wallfacer.1"});
  const std::vector<std::string> sixteen = names(candidate_layouts(16));
  CHECK(std::set<std::string>(sixteen.begin(), sixteen.end()).size() == sixteen.size());
  CHECK_THROWS_WITH(candidate_layouts(0), Catch::Contains("at least one rank"));
}

}  // namespace
}  // namespace wf::config
