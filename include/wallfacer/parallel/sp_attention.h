#pragma once
// Sequence-parallel attention strategies. Each is an nn::AttentionStrategy: a model calls
// attention on its local shard — q [B, N/P, h, d], k, v [B, N/P, h_kv, d] in the configured
// sequence layout — and gets its local shard of the output [B, N/P, h, d] and of lse
// [B, h, N/P]; the strategy communicates over the sp groups and is an autograd Function, so
// the backward communicates too. Global positions come from the layout, not from
// AttentionOptions offsets (which must be 0 here).
//
//   ring       pass-K/V ring over the sp group, P − 1 steps (the paper's baseline)
//   ulysses    all-to-all from sequence- to head-sharded, local attention, all-to-all back;
//              P must divide h, and divide or be divided by h_kv (ulysses_heads.h)
//   wallfacer  teams of C ranks, C² sub-rings of G = P/C² ranks (wallfacer-algorithm.md);
//              C = 1 behaves exactly as ring attention
//   ulysses-wallfacer  the hybrid (USP's Ulysses × ring, with WallFacer as the ring): an
//              all-to-all over U Ulysses ranks makes U·N/P tokens × h/U heads, WallFacer runs
//              over the sp/U-rank WallFacer group on them, an all-to-all brings O back. U and
//              the order of the two come from the grid (ParallelConfig::U, ulysses_inner);
//              U = 1 behaves exactly as wallfacer, U = P exactly as ulysses
#include <memory>
#include <string>

#include "wallfacer/comm/group.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/parallel/block_attention.h"
#include "wallfacer/parallel/sequence_layout.h"
#include "wallfacer/parallel/sp_strategy.h"

namespace wf::parallel {

// The team size C and placement of WallFacer come from the grid (ParallelConfig::C), which
// also built the "sp.team" and "sp.ring" groups; ring and Ulysses ignore them.
struct SpAttentionConfig {
  SpStrategy strategy = SpStrategy::wallfacer;
  SequenceLayout layout = SequenceLayout::zigzag;  // zigzag for causal, contiguous for full
  std::int64_t seq_len = 0;                        // global N
  bool keep_forward_kv = true;                     // WallFacer backward: keep the dispatched K/V
};

// Which tokens this rank holds under the strategy (SpShard, sequence_layout.h).
SpShard sp_shard(const SpAttentionConfig& config, const comm::CommGrid& grid);

// The (query, key) pairs logical sp rank l computes in one forward of `strategy` over P ranks
// (teams of C, Ulysses degree U), per batch row and head, as its SpAttentionWork counts them:
// sequence_layout.h's work functions for ring and WallFacer (the hybrid: WallFacer's over its
// P/U ranks), every pair of the sequence for Ulysses (each rank attends over all of it for its
// heads). With packed `documents` only the pairs inside them, on the layout of `chunks`.
std::int64_t sp_rank_work_pairs(SpStrategy strategy, SequenceLayout layout, std::int64_t N, int P, int C, int U,
                                int logical_index, bool causal, const DocumentBounds& documents = {},
                                const ChunkAssignment* chunks = nullptr);

// Builds the strategy for this rank from the grid's sp groups ("sp", "sp.team", "sp.ring"; the
// hybrid also "sp.ulysses" and "sp.wallfacer").
// Validates the configuration (sequence length divisibility, Ulysses head counts) with one
// message that is the same on every rank.
std::shared_ptr<nn::AttentionStrategy> make_sp_attention(const SpAttentionConfig& config, comm::CommGrid& grid);

// The attention work a strategy did on this rank in its most recent forward and backward, in
// block_attention's units (blocks and visible pairs per batch element and head). Strategies
// that count their work implement it next to nn::AttentionStrategy (ring and Ulysses do); the
// tests read it with dynamic_cast to check the work balance of the layouts.
class SpAttentionWork {
 public:
  virtual ~SpAttentionWork() = default;
  virtual BlockAttentionStats last_forward_work() const = 0;
  virtual BlockAttentionStats last_backward_work() const = 0;
};

}  // namespace wf::parallel
