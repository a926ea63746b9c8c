#pragma once
// The ulysses-wallfacer hybrid (internal to src/parallel; models get it through
// make_sp_attention): Ulysses head parallelism over the grid's "sp.ulysses" group of U ranks
// times WallFacer attention over its "sp.wallfacer" group of sp/U ranks, as USP combines
// Ulysses with ring attention.
#include <memory>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

// U and C from grid.config(). U = 1 returns the WallFacer strategy and U = sp the Ulysses one
// (the hybrid's degenerate cases are exactly them). The grid's groups must outlive the strategy
// and every backward through it. wf::Error when config.seq_len does not split over the layout.
std::shared_ptr<nn::AttentionStrategy> make_ulysses_wallfacer_attention(const SpAttentionConfig& config,
                                                                        comm::CommGrid& grid);

}  // namespace wf::parallel
