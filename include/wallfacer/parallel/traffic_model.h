#pragma once
// The exact bytes each sequence-parallel attention strategy moves per rank in one attention
// call, forward or backward: the values the tests compare the comm::TrafficRegistry counters
// with, and that the benchmarks print beside measured times. Counting follows
// comm/traffic.h (all-gather of an output S: (C−1)/C·S; reduce-scatter of an input S:
// (C−1)/C·S; all-to-all of S: (P−1)/P·S; P2P: the message, zero when the peer is the rank
// itself), with the same integer arithmetic as comm::Group.
//
// Each formula is also the CONTRACT the implementation follows (which tensors travel, how
// often, in which dtype); docs/sequence-layout.md derives them. With n = N/P local tokens:
//   E = B·n·h·d, E_kv = B·n·h_kv·d elements; R = B·n·h lse (or D) values of one local slice.
//   a = ElementBytes::activation, s = ::stats, p = ::partial; G = P/C²; self = the rank's
//   initial dispatch target is itself (then its dispatch source is too).
//
// ring attention (C = 1), P2P only, with H the ring's hops (P − 1 unpacked; with packed
// documents the steps of document_ring_steps.h less one):
//   forward   2·E_kv·a·H                                 K, V to the next rank that needs them
//   backward  2·E_kv·a·H + 2·E_kv·p·(H + 1)  (0 at H = 0) K, V as forward; dK, dV (partial
//             sums) travel with them every hop and take one more hop home
// Ulysses, collectives only (Q‖K‖V in, O‖lse out; dO‖d_lse in, dQ‖dK‖dV out):
//   forward   2·A(E·a) + 2·A(ρ·E_kv·a) + A(R·s), A(S) = (P−1)·(S/P)   Q, K, V in, O and lse out
//   backward  the same                                                dO and d_lse in, dQ, dK, dV out
//   ρ = max(1, P/h_kv): with h_kv < P each kv head is sent to (and its dK, dV come back from)
//   the P/h_kv ranks sharing it (ulysses_heads.h)
// WallFacer, per rank:
//   forward collectives  (C−1)·(E·a + 2·E_kv·a + C·R·s + E·p)
//                        all-gather Q, K, V; all-gather the members' lse partials of the team's
//                        C·n queries (comm has no log-sum-exp all-reduce); reduce-scatter the
//                        rescaled partial O
//   forward P2P          2·C·E_kv·a·(H + [not self])   dispatch + H shifts of team K, V
//   backward collectives (C−1)·(E·a + R·s) + [redispatch] 2·(C−1)·E_kv·a + (C−1)·(E·p + 2·E_kv·p)
//                        all-gather dO and the members' D; re-gather K, V; reduce-scatter dQ, dK, dV
//   backward P2P         [redispatch and not self] 2·C·E_kv·a        re-dispatch of team K, V
//                        + H·C·(2·E·a + 2·R·s + E·p)                 query bundle Q, dO, lse, D, dQ
//                        + [H > 0] C·E·p                             dQ home
//                        + [not self] 2·C·E_kv·p                     dK, dV back to the K/V origin
//   of which over the sp group ("sp": the dispatch partners): forward 2·C·E_kv·a·[not self];
//   backward [not self]·(2·C·E_kv·p + [redispatch] 2·C·E_kv·a); the rest of the P2P is on the
//   sub-ring ("sp.ring") and every collective in the team ("sp.team"). H: the sub-ring's hops
//   in that pass, G − 1 unpacked (G = P/C²); with packed documents wallfacer_steps less one
//   (each pass has its own). The team collectives do not depend on the documents.
// ulysses-wallfacer (U Ulysses ranks × W = P/U WallFacer ranks in teams of C), per rank at
// logical sp index l = l_W·U + u (comm::ProcessGrid::sp_logical_index): the sum of its parts,
//   Ulysses   the Ulysses formula over U ranks for the member's N/W tokens (so its local slice
//             is the rank's own n = N/P tokens, all h heads), collectives on "sp.ulysses"
//   WallFacer the WallFacer formula over W ranks for N tokens, h/U query heads and h_kv' =
//             max(1, h_kv/U) kv heads (ulysses_heads.h), at WallFacer logical index l_W: its
//             dispatch on "sp.wallfacer", the rest on "sp.team" and "sp.ring"
//   (ulysses_wallfacer_dims gives the two parts' dims). Every element is counted in the bytes
//   passed: under bf16 both parts move bf16 activations and f32 statistics and partial sums,
//   as every strategy does (train::sp_element_bytes).
// A call replayed under activation checkpointing (AttentionStrategy::replay) sends nothing in
// the replay; its backward moves (test_sp_replay.cpp measures it):
//   ring       the ordinary backward
//   Ulysses    forward + backward: the replay's q, k, v in and o, lse back ride in the backward
//   WallFacer  the backward with K/V re-dispatched, plus (C−1)·(E·a + R·s): q joins the dO
//              all-gather and lse the D all-gather (the replay kept only the member's rows)
//   ulysses-wallfacer  its Ulysses part's replayed backward (forward + backward: q, k, v, o,
//              lse ride in the dO all-to-all) plus its WallFacer part's replayed backward
// Sent equals received for every rank in every case.
#include <cstdint>

#include "wallfacer/comm/group.h"
#include "wallfacer/parallel/sp_attention.h"

namespace wf::parallel {

enum class Pass { forward, backward };

struct AttentionDims {
  std::int64_t batch = 1;     // B
  std::int64_t seq_len = 0;   // N: tokens of the whole sequence (a multiple of P)
  std::int64_t heads = 0;     // h
  std::int64_t kv_heads = 0;  // h_kv, dividing h (GQA: K/V are sent unrepeated, except that
                              // Ulysses with h_kv < P sends each kv head to every rank sharing it)
  std::int64_t head_dim = 0;  // d
};

// Bytes per element of each kind of tensor that travels.
struct ElementBytes {
  std::int64_t activation = 4;  // Q, K, V, the final O, dO (and Ulysses' dQ, dK, dV)
  std::int64_t stats = 4;       // lse and D = rowsum(dO ∘ O): fp32 in every kernel
  std::int64_t partial = 4;     // partial sums that are added across ranks: WallFacer's rescaled
                                // partial O, and every travelling or reduced dQ, dK, dV partial
};

// How the WallFacer backward gets back the forward's K/V placement (each rank holds the team
// K/V it received in the initial dispatch, so dK, dV go back along the inverse dispatch).
enum class BackwardKv {
  redispatch,    // all-gather K, V in the team again and redo the dispatch
  keep_forward,  // the forward keeps its step-0 K/V buffer (2·C·E_kv per rank per layer)
};

// The hops of an unpacked call's ring: P − 1 (ring attention) or G − 1 (WallFacer's sub-ring).
// A packed call's are fewer (document_ring_steps.h's ring_hops of its steps).
inline constexpr int kFullRing = -1;

// Bytes one rank sends and receives, split the way comm::TrafficCounters reports them.
struct SpTraffic {
  std::int64_t p2p_sent = 0, p2p_received = 0;
  std::int64_t collective_sent = 0, collective_received = 0;
  SpTraffic& operator+=(const SpTraffic& other);
  friend bool operator==(const SpTraffic&, const SpTraffic&) = default;
};

// What this rank's counters recorded on the sp groups ("sp", "sp.team", "sp.ring", ...) since
// the last comm::TrafficRegistry reset, in the same terms: the measured side of the formulas.
SpTraffic measured_sp_traffic();
// The element-wise sum over the ranks of `group` (a collective; not itself counted).
SpTraffic sum_over_ranks(comm::Group& group, const SpTraffic& mine);

// Per rank (identical on every rank). Throw wf::Error on dims that do not split over P.
SpTraffic ring_attention_traffic(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes = {},
                                 int hops = kFullRing);
// Needs the heads to follow ulysses_heads.h (the all-to-alls scatter heads).
SpTraffic ulysses_traffic(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes = {});
// Per rank, named by its logical sp index (comm::WallFacerLayout::logical_index): the self-
// dispatch cases depend on it. Needs C² dividing P. C = 1 forward equals ring attention's.
// hops: the sub-ring's in this pass (kFullRing: G − 1).
SpTraffic wallfacer_traffic(const AttentionDims& dims, int P, int C, int logical_index, Pass pass,
                            const ElementBytes& bytes = {}, BackwardKv backward_kv = BackwardKv::redispatch,
                            int hops = kFullRing);

// The part of wallfacer_traffic's P2P (sent, = received) that travels between dispatch
// partners over the whole sp group; the rest of its P2P stays on the sub-ring.
std::int64_t wallfacer_dispatch_bytes(const AttentionDims& dims, int P, int C, int logical_index, Pass pass,
                                      const ElementBytes& bytes = {}, BackwardKv backward_kv = BackwardKv::redispatch);

// The two parts of the ulysses-wallfacer hybrid (header comment): the Ulysses all-to-all's
// dims (over U ranks: N/W tokens, every head) and WallFacer's (over W = P/U ranks: N tokens,
// the heads one Ulysses rank holds). Needs U | P and the heads to follow ulysses_heads.h for U.
struct UlyssesWallFacerDims {
  AttentionDims ulysses, wallfacer;
};
UlyssesWallFacerDims ulysses_wallfacer_dims(const AttentionDims& dims, int P, int U);
// Per rank, named by its logical sp index l = l_W·U + u. Needs C² dividing P/U. hops: the
// WallFacer part's sub-ring's (kFullRing: G − 1 with G = P/(U·C²)).
SpTraffic ulysses_wallfacer_traffic(const AttentionDims& dims, int P, int U, int C, int logical_index, Pass pass,
                                    const ElementBytes& bytes = {}, BackwardKv backward_kv = BackwardKv::redispatch,
                                    int hops = kFullRing);

// The formula of `strategy` for one rank: C and logical_index matter to WallFacer and the
// hybrid only, U (the hybrid's Ulysses degree; 1 otherwise) to the hybrid only, and
// backward_kv to their backward only, hops (the K/V ring's or the sub-ring's in this pass,
// kFullRing unpacked) to all but Ulysses.
SpTraffic sp_attention_traffic(SpStrategy strategy, const AttentionDims& dims, int P, int U, int C, int logical_index,
                               Pass pass, const ElementBytes& bytes = {},
                               BackwardKv backward_kv = BackwardKv::keep_forward, int hops = kFullRing);
// The backward of a replayed call (activation checkpointing at the attention output), per rank;
// hops: its backward ring's.
SpTraffic sp_replay_backward_traffic(SpStrategy strategy, const AttentionDims& dims, int P, int U, int C,
                                     int logical_index, const ElementBytes& bytes = {}, int hops = kFullRing);

// Sums over the P ranks.
SpTraffic ring_attention_traffic_total(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes = {},
                                       int hops = kFullRing);
SpTraffic ulysses_traffic_total(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes = {});
SpTraffic wallfacer_traffic_total(const AttentionDims& dims, int P, int C, Pass pass, const ElementBytes& bytes = {},
                                  BackwardKv backward_kv = BackwardKv::redispatch, int hops = kFullRing);

}  // namespace wf::parallel
