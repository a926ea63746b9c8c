#pragma once
// The sequence-parallel strategies by name (parallel/sp_attention.h describes and builds them).
// A header of its own so that the run configuration names a strategy without including the
// strategies, their communication and nn.
#include <string_view>

namespace wf::parallel {

enum class SpStrategy { ring, ulysses, wallfacer, ulysses_wallfacer };
const char* sp_strategy_name(SpStrategy s);
SpStrategy parse_sp_strategy(std::string_view name);  // wf::Error listing the valid names
// The strategy that runs for `strategy` over P sp ranks with Ulysses degree U: the
// ulysses-wallfacer hybrid at U = 1 is WallFacer and at U = P Ulysses
// (make_ulysses_wallfacer_attention builds exactly those); every other strategy is itself.
SpStrategy effective_sp_strategy(SpStrategy strategy, int P, int U);

}  // namespace wf::parallel
