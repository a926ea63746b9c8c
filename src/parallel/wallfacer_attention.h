#pragma once
// WallFacer multi-ring attention (shared/design/wallfacer-algorithm.md): teams of C ranks
// all-gather Q, K, V, dispatch the team's K/V once, circulate it on C² concurrent sub-rings of
// G = P/C² ranks, and merge the members' partial outputs inside the team. The backward keeps
// K/V in place and circulates a query bundle instead. Which tensors travel, how often and in
// which dtype is the contract of docs/sequence-layout.md §5 (wallfacer_traffic); the tests
// compare the traffic counters with it exactly. make_sp_attention builds this for
// SpStrategy::wallfacer; docs/sequence-parallelism.md describes it.
#include <memory>

#include "src/parallel/sp_strategy_base.h"
#include "wallfacer/autograd/function.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/nn/attention_strategy.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

// The strategy for this rank of `grid` (team size C and placement from grid.config()). Uses the
// grid's "sp", "sp.team" and "sp.ring" groups, which must outlive it and every backward pass
// through it. wf::Error when config.seq_len does not split over the layout.
std::shared_ptr<nn::AttentionStrategy> make_wallfacer_attention(const SpAttentionConfig& config, comm::CommGrid& grid);

namespace detail {

// The pieces the ulysses-wallfacer hybrid runs WallFacer with (on its head-sharded tensors):
// this rank's place in the WallFacer group (groups, peers, the runs of every block), with the
// dispatch over `dispatch_group` ("sp" for WallFacer, "sp.wallfacer" for the hybrid) and the
// teams and sub-rings of "sp.team", "sp.ring". config.seq_len is the whole sequence.
struct WallFacerRank;
std::shared_ptr<const WallFacerRank> locate_wallfacer(const SpAttentionConfig& config, comm::CommGrid& grid,
                                                     const char* dispatch_group);
// (Re)computes the runs of a located rank from its teams and chunk assignment.
void lay_out_runs(WallFacerRank& rank);

// A located rank for packed documents: laid out by the chunk assignment of their work
// (document_chunks over the sp group's P, C, U), the one the last call's documents gave kept.
class WallFacerDocuments {
 public:
  // `base` itself when the documents ask for no assignment.
  std::shared_ptr<const WallFacerRank> rank_for(const std::shared_ptr<const WallFacerRank>& base,
                                                const DocumentBounds& documents, int P, int C, int U);

 private:
  DocumentChunkCache chunks_;
  std::shared_ptr<const WallFacerRank> rank_;
};

struct WallFacerCall {
  bool causal = false;
  double scale = 0;
  bool keep_forward_kv = true;
  DocumentBounds documents = {};  // packed documents (AttentionOptions::doc_bounds), global positions
};
// WallFacer's autograd Function (inputs q, k, v of this member; outputs out, lse), to apply or
// to drive by hand: its forward and backward take a Context of the caller's. A replay
// (`replayed` set) moves nothing in the forward and re-dispatches K/V in the backward.
std::shared_ptr<autograd::Function> make_wallfacer_function(std::shared_ptr<const WallFacerRank> rank,
                                                            const WallFacerCall& call,
                                                            std::shared_ptr<WorkRecord> work, Replayed replayed);

}  // namespace detail

}  // namespace wf::parallel
