#pragma once
// Ulysses attention (internal to src/parallel; models get it through make_sp_attention):
// all-to-all from sequence- to head-sharded, attention over the whole sequence for h/P heads,
// all-to-all back. The head counts must follow ulysses_heads.h (checked at the first call, when
// the heads are known).
#include <memory>

#include "wallfacer/comm/group.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

// `sp` must outlive every backward pass through the strategy's outputs.
std::shared_ptr<nn::AttentionStrategy> make_ulysses_attention(const SpAttentionConfig& config, comm::Group& sp);

}  // namespace wf::parallel
