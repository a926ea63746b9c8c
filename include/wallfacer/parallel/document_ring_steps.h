#pragma once
// Which steps of a K/V ring a call with packed documents (AttentionOptions::doc_bounds) runs.
// A ring step s puts every rank's queries together with the block it holds s steps into the
// ring. With documents most remote blocks hold no key of a query's documents, and a step at
// which that is so on EVERY rank moves a block nobody needs. The rule (docs/
// sequence-parallelism.md §13): the ring runs step 0 (the block a rank starts with) and the
// steps at which some rank, in some batch row, has a visible (query, key) pair, in order; from
// one to the next the block hops over the steps left out, straight to the rank that needs it
// (its ring distance is the gap between the two steps), and the backward's accumulator goes home
// from the last one. With every step kept this is the plain ring, message for message.
//
// Pure functions of what every rank already knows: every rank's (or team's) token runs and the
// call's doc_bounds, which are the same on every sp rank. So every rank computes the same steps,
// with no message. Without documents every step is kept (an unpacked call moves what it always
// moved).
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/ops/attention.h"
#include "wallfacer/parallel/sequence_layout.h"
#include "wallfacer/parallel/sp_strategy.h"
#include "wallfacer/parallel/traffic_model.h"

namespace wf::parallel {

// Whether some query of q_runs may attend to some key of kv_runs: both in one document of some
// row of `documents` (any pair when it is empty), the key not after the query when causal.
bool runs_attend(const std::vector<TokenRun>& q_runs, const std::vector<TokenRun>& kv_runs, bool causal,
                 const DocumentBounds& documents);

// One block of a ring step: the queries of runs[queries] against the keys of runs[keys].
struct RingBlock {
  int queries = 0, keys = 0;
};

// The steps to run: 0, then every step s of blocks_by_step (one list of blocks per step, over
// every rank) with a block whose runs attend; ascending. Every step when `documents` is empty.
std::vector<int> attending_steps(const std::vector<std::vector<TokenRun>>& runs,
                                 const std::vector<std::vector<RingBlock>>& blocks_by_step, bool causal,
                                 const DocumentBounds& documents);

// Ring attention over P = rank_runs.size() ranks: at step s rank r holds the K/V of rank
// (r − s) mod P, forward and backward (the dK, dV accumulator travels with it).
std::vector<int> ring_attention_steps(const std::vector<std::vector<TokenRun>>& rank_runs, bool causal,
                                      const DocumentBounds& documents);

// WallFacer's sub-rings (G = layout.ring_size() steps); team_runs[t] is team t's tokens. The
// forward's step s pairs a rank's team queries with the K/V of kv_team_at_step(rank, s); the
// backward's pairs the query bundle that started s positions back on the sub-ring with the K/V
// the rank held at step 0 (which is why the two passes have their own steps).
std::vector<int> wallfacer_steps(const comm::WallFacerLayout& layout,
                                 const std::vector<std::vector<TokenRun>>& team_runs, Pass pass, bool causal,
                                 const DocumentBounds& documents);

// The hops of a ring running `steps` (steps.size() − 1): the count traffic_model.h takes.
int ring_hops(const std::vector<int>& steps);

// The hops a strategy's ring makes in one pass of a call over N tokens with `documents`, on the
// layout the documents' work gives (sequence_layout.h's document_chunks, as the loader and the
// strategies lay a packed batch out): ring attention's K/V ring, or WallFacer's sub-ring (the
// hybrid's WallFacer part, over P/U ranks). kFullRing without documents, and for Ulysses (no ring).
// What traffic_model.h's `hops` is for a packed call (bench attention, the tests).
int sp_ring_hops(SpStrategy strategy, SequenceLayout layout, std::int64_t N, int P, int C, int U, bool causal,
                 const DocumentBounds& documents, Pass pass);

}  // namespace wf::parallel
