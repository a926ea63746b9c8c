#pragma once
// WallFacer multi-ring attention (shared/design/wallfacer-algorithm.md): teams of C ranks
// all-gather Q, K, V, dispatch the team's K/V once, circulate it on C² concurrent sub-rings of
// G = P/C² ranks, and merge the members' partial outputs inside the team. The backward keeps
// K/V in place and circulates a query bundle instead. Which tensors travel, how often and in
// which dtype is the contract of docs/sequence-layout.md §5 (wallfacer_traffic); the tests
// compare the traffic counters with it exactly. make_sp_attention builds this for
// SpStrategy::wallfacer; docs/sequence-parallelism.md describes it.
#include <memory>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

// The strategy for this rank of `grid` (team size C and placement from grid.config()). Uses the
// grid's "sp", "sp.team" and "sp.ring" groups, which must outlive it and every backward pass
// through it. wf::Error when config.seq_len does not split over the layout.
std::shared_ptr<nn::AttentionStrategy> make_wallfacer_attention(const SpAttentionConfig& config, comm::CommGrid& grid);

}  // namespace wf::parallel
