#include "wallfacer/parallel/sp_strategy.h"

#include "wallfacer/core/error.h"

namespace wf::parallel {
namespace {

constexpr SpStrategy kStrategies[] = {SpStrategy::ring, SpStrategy::ulysses, SpStrategy::wallfacer,
                                      SpStrategy::ulysses_wallfacer};

}  // namespace

const char* sp_strategy_name(SpStrategy s) {
  switch (s) {
    case SpStrategy::ring: return "ring";
    case SpStrategy::ulysses: return "ulysses";
    case SpStrategy::wallfacer: return "wallfacer";
    case SpStrategy::ulysses_wallfacer: return "ulysses-wallfacer";
  }
  WF_FAIL("unknown sp strategy {}", static_cast<int>(s));
}

SpStrategy effective_sp_strategy(SpStrategy strategy, int P, int U) {
  if (strategy != SpStrategy::ulysses_wallfacer) return strategy;
  if (U == 1) return SpStrategy::wallfacer;
  return U == P ? SpStrategy::ulysses : strategy;
}

SpStrategy parse_sp_strategy(std::string_view name) {
  for (SpStrategy s : kStrategies) {
    if (name == sp_strategy_name(s)) return s;
  }
  WF_FAIL("unknown sequence-parallel strategy '{}'; the strategies are ring, ulysses, wallfacer, ulysses-wallfacer",
          name);
}

}  // namespace wf::parallel
