#pragma once
// Ring attention (internal to src/parallel; models get it through make_sp_attention): the
// classic pass-K/V ring over the sp group, P − 1 shifts, with the C = 1 sequence layout.
#include <memory>

#include "wallfacer/comm/group.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

// `sp` must outlive every backward pass through the strategy's outputs.
std::shared_ptr<nn::AttentionStrategy> make_ring_attention(const SpAttentionConfig& config, comm::Group& sp);

}  // namespace wf::parallel
