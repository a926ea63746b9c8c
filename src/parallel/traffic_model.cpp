#include "wallfacer/parallel/traffic_model.h"

#include <string>

#include "wallfacer/comm/traffic.h"

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/ulysses_heads.h"

namespace wf::parallel {

SpTraffic& SpTraffic::operator+=(const SpTraffic& other) {
  p2p_sent += other.p2p_sent;
  p2p_received += other.p2p_received;
  collective_sent += other.collective_sent;
  collective_received += other.collective_received;
  return *this;
}

namespace {

// Element counts of one rank's local slice (n = N/P tokens).
struct LocalSizes {
  std::int64_t q;   // E = B·n·h·d: one of Q, O, dO, dQ
  std::int64_t kv;  // E_kv = B·n·h_kv·d: one of K, V, dK, dV
  std::int64_t rows;  // R = B·n·h: lse or D
};

LocalSizes local_sizes(const AttentionDims& dims, int P, const ElementBytes& bytes) {
  WF_CHECK(P >= 1, "traffic model: the sp group needs at least 1 rank (got P = {})", P);
  WF_CHECK(dims.batch >= 1 && dims.heads >= 1 && dims.kv_heads >= 1 && dims.head_dim >= 1,
           "traffic model: batch {}, heads {}, kv_heads {}, head_dim {} must all be >= 1", dims.batch, dims.heads,
           dims.kv_heads, dims.head_dim);
  WF_CHECK(dims.heads % dims.kv_heads == 0, "traffic model: kv_heads {} must divide heads {}", dims.kv_heads,
           dims.heads);
  WF_CHECK(dims.seq_len > 0 && dims.seq_len % P == 0,
           "traffic model: N = {} tokens must be a positive multiple of P = {}", dims.seq_len, P);
  WF_CHECK(bytes.activation >= 1 && bytes.stats >= 1 && bytes.partial >= 1,
           "traffic model: element sizes (activation {}, stats {}, partial {}) must be >= 1", bytes.activation,
           bytes.stats, bytes.partial);
  const std::int64_t rows = dims.batch * (dims.seq_len / P) * dims.heads;
  return {rows * dims.head_dim, dims.batch * (dims.seq_len / P) * dims.kv_heads * dims.head_dim, rows};
}

// The counting conventions of comm/traffic.h, with comm::Group's integer arithmetic.
std::int64_t all_gather_bytes(std::int64_t piece, int group_size) { return (group_size - 1) * piece; }
std::int64_t reduce_scatter_bytes(std::int64_t input, int group_size) {
  return (group_size - 1) * (input / group_size);
}
std::int64_t all_to_all_bytes(std::int64_t input, int group_size) { return (group_size - 1) * (input / group_size); }

// Every strategy here is symmetric per rank: what a rank sends equals what it receives.
SpTraffic symmetric(std::int64_t p2p, std::int64_t collective) { return {p2p, p2p, collective, collective}; }

template <typename PerRank>
SpTraffic sum_over_ranks(int P, PerRank per_rank) {
  SpTraffic total;
  for (int l = 0; l < P; ++l) total += per_rank(l);
  return total;
}

// A ring's hops: kFullRing is all steps − 1 of a ring of `steps`; else within [0, steps − 1].
std::int64_t ring_hops_of(int hops, int steps, const char* ring) {
  WF_CHECK(hops == kFullRing || (hops >= 0 && hops < steps),
           "traffic model: {} of {} steps makes 0 to {} hops (or kFullRing), got {}", ring, steps, steps - 1, hops);
  return hops == kFullRing ? steps - 1 : hops;
}

}  // namespace

SpTraffic ring_attention_traffic(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes, int hops) {
  const LocalSizes e = local_sizes(dims, P, bytes);
  const std::int64_t H = ring_hops_of(hops, P, "ring attention");
  const std::int64_t kv_ring = 2 * e.kv * bytes.activation * H;
  if (pass == Pass::forward) return symmetric(kv_ring, 0);
  // dK, dV ride along with K, V every hop and take one more hop home; with no hop (P = 1, or
  // documents that need no remote block) the accumulator never leaves.
  const std::int64_t dkv_ring = H > 0 ? 2 * e.kv * bytes.partial * (H + 1) : 0;
  return symmetric(kv_ring + dkv_ring, 0);
}

SpTraffic ulysses_traffic(const AttentionDims& dims, int P, Pass /*pass: both directions move the same*/,
                          const ElementBytes& bytes) {
  const LocalSizes e = local_sizes(dims, P, bytes);
  const std::string problem = ulysses_heads_problem(dims.heads, dims.kv_heads, P);
  WF_CHECK(problem.empty(), "traffic model: {}", problem);
  // Forward: Q, K, V sequence → heads, O and lse heads → sequence. Backward: dO and d_lse in,
  // dQ, dK, dV out. lse must travel because the AttentionStrategy contract returns it on the
  // sequence shard; it rides in the O message (its gradient in the dO one). With h_kv < P each
  // kv head goes to the P/h_kv ranks sharing it (and its gradient comes back from each), so the
  // K and V pieces are those of max(h_kv, P) heads. Each piece is a multiple of P elements, so
  // summing the pieces' all-to-all bytes equals the bytes of the packed message.
  const std::int64_t kv_heads_sent = ulysses_kv_heads_per_rank(dims.kv_heads, P) * P;  // max(h_kv, P)
  const std::int64_t kv_sent = e.kv / dims.kv_heads * kv_heads_sent;
  const std::int64_t collective = 2 * all_to_all_bytes(e.q * bytes.activation, P) +
                                  2 * all_to_all_bytes(kv_sent * bytes.activation, P) +
                                  all_to_all_bytes(e.rows * bytes.stats, P);
  return symmetric(0, collective);
}

SpTraffic wallfacer_traffic(const AttentionDims& dims, int P, int C, int logical_index, Pass pass,
                            const ElementBytes& bytes, BackwardKv backward_kv, int hops) {
  const LocalSizes e = local_sizes(dims, P, bytes);
  const comm::WallFacerLayout layout(P, C, comm::Placement::collectives_intra);  // logical = sp index
  const std::int64_t H = ring_hops_of(hops, layout.ring_size(), "WallFacer's sub-ring");
  const std::int64_t team_kv = 2 * C * e.kv;  // elements of the team's K and V (or dK and dV)

  const std::int64_t dispatch = wallfacer_dispatch_bytes(dims, P, C, logical_index, pass, bytes, backward_kv);
  if (pass == Pass::forward) {
    const std::int64_t collective = all_gather_bytes(e.q * bytes.activation, C) +           // Q
                                    2 * all_gather_bytes(e.kv * bytes.activation, C) +      // K, V
                                    all_gather_bytes(C * e.rows * bytes.stats, C) +         // lse partials
                                    reduce_scatter_bytes(C * e.q * bytes.partial, C);       // O
    const std::int64_t p2p = team_kv * bytes.activation * H + dispatch;
    return symmetric(p2p, collective);
  }

  const bool redispatch = backward_kv == BackwardKv::redispatch;
  std::int64_t collective = all_gather_bytes(e.q * bytes.activation, C) +  // dO
                            all_gather_bytes(e.rows * bytes.stats, C) +    // D of the member's own rows
                            reduce_scatter_bytes(C * e.q * bytes.partial, C) +       // dQ
                            2 * reduce_scatter_bytes(C * e.kv * bytes.partial, C);   // dK, dV
  if (redispatch) collective += 2 * all_gather_bytes(e.kv * bytes.activation, C);   // K, V again
  const std::int64_t bundle = C * (2 * e.q * bytes.activation + 2 * e.rows * bytes.stats + e.q * bytes.partial);
  std::int64_t p2p = H * bundle + dispatch;
  if (H > 0) p2p += C * e.q * bytes.partial;  // dQ home from where its bundle's last step ran
  return symmetric(p2p, collective);
}

std::int64_t wallfacer_dispatch_bytes(const AttentionDims& dims, int P, int C, int logical_index, Pass pass,
                                      const ElementBytes& bytes, BackwardKv backward_kv) {
  const LocalSizes e = local_sizes(dims, P, bytes);
  const comm::WallFacerLayout layout(P, C, comm::Placement::collectives_intra);  // logical = sp index
  if (layout.initial_send(logical_index) == logical_index) return 0;  // dispatched to itself: no message
  const std::int64_t team_kv = 2 * C * e.kv;  // elements of the team's K and V (or dK and dV)
  if (pass == Pass::forward) return team_kv * bytes.activation;  // K, V to the dispatch target
  std::int64_t sent = team_kv * bytes.partial;                   // dK, dV to the K/V origin
  if (backward_kv == BackwardKv::redispatch) sent += team_kv * bytes.activation;  // K, V dispatch again
  return sent;
}

UlyssesWallFacerDims ulysses_wallfacer_dims(const AttentionDims& dims, int P, int U) {
  WF_CHECK(U >= 1 && P >= 1 && P % U == 0, "traffic model: the Ulysses degree U = {} must be >= 1 and divide P = {}",
           U, P);
  const std::string problem = ulysses_heads_problem(dims.heads, dims.kv_heads, U);
  WF_CHECK(problem.empty(), "traffic model: ulysses-wallfacer with U = {} (the 'P' below): {}", U, problem);
  const int W = P / U;
  WF_CHECK(dims.seq_len > 0 && dims.seq_len % P == 0,
           "traffic model: N = {} tokens must be a positive multiple of P = {}", dims.seq_len, P);
  AttentionDims ulysses = dims, wallfacer = dims;
  ulysses.seq_len = dims.seq_len / W;  // the member's shard, over U ranks
  wallfacer.heads = dims.heads / U;
  wallfacer.kv_heads = ulysses_kv_heads_per_rank(dims.kv_heads, U);
  return {ulysses, wallfacer};
}

SpTraffic ulysses_wallfacer_traffic(const AttentionDims& dims, int P, int U, int C, int logical_index, Pass pass,
                                    const ElementBytes& bytes, BackwardKv backward_kv, int hops) {
  const UlyssesWallFacerDims parts = ulysses_wallfacer_dims(dims, P, U);
  SpTraffic t = ulysses_traffic(parts.ulysses, U, pass, bytes);
  t += wallfacer_traffic(parts.wallfacer, P / U, C, logical_index / U, pass, bytes, backward_kv, hops);
  return t;
}

SpTraffic sp_attention_traffic(SpStrategy strategy, const AttentionDims& dims, int P, int U, int C, int logical_index,
                               Pass pass, const ElementBytes& bytes, BackwardKv backward_kv, int hops) {
  switch (strategy) {
    case SpStrategy::ring: return ring_attention_traffic(dims, P, pass, bytes, hops);
    case SpStrategy::ulysses: return ulysses_traffic(dims, P, pass, bytes);
    case SpStrategy::wallfacer: return wallfacer_traffic(dims, P, C, logical_index, pass, bytes, backward_kv, hops);
    case SpStrategy::ulysses_wallfacer:
      return ulysses_wallfacer_traffic(dims, P, U, C, logical_index, pass, bytes, backward_kv, hops);
  }
  WF_FAIL("traffic model: unknown sp strategy {}", static_cast<int>(strategy));
}

SpTraffic sp_replay_backward_traffic(SpStrategy strategy, const AttentionDims& dims, int P, int U, int C,
                                     int logical_index, const ElementBytes& bytes, int hops) {
  switch (strategy) {
    case SpStrategy::ring: return ring_attention_traffic(dims, P, Pass::backward, bytes, hops);
    case SpStrategy::ulysses: {
      SpTraffic t = ulysses_traffic(dims, P, Pass::forward, bytes);
      t += ulysses_traffic(dims, P, Pass::backward, bytes);
      return t;
    }
    case SpStrategy::wallfacer: {
      const LocalSizes e = local_sizes(dims, P, bytes);
      SpTraffic t =
          wallfacer_traffic(dims, P, C, logical_index, Pass::backward, bytes, BackwardKv::redispatch, hops);
      t += symmetric(0, all_gather_bytes(e.q * bytes.activation + e.rows * bytes.stats, C));
      return t;
    }
    case SpStrategy::ulysses_wallfacer: {
      const UlyssesWallFacerDims parts = ulysses_wallfacer_dims(dims, P, U);
      SpTraffic t = sp_replay_backward_traffic(SpStrategy::ulysses, parts.ulysses, U, 1, 1, 0, bytes);
      t += sp_replay_backward_traffic(SpStrategy::wallfacer, parts.wallfacer, P / U, 1, C, logical_index / U, bytes,
                                      hops);
      return t;
    }
  }
  WF_FAIL("traffic model: unknown sp strategy {}", static_cast<int>(strategy));
}

SpTraffic ring_attention_traffic_total(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes,
                                       int hops) {
  return sum_over_ranks(P, [&](int) { return ring_attention_traffic(dims, P, pass, bytes, hops); });
}

SpTraffic ulysses_traffic_total(const AttentionDims& dims, int P, Pass pass, const ElementBytes& bytes) {
  return sum_over_ranks(P, [&](int) { return ulysses_traffic(dims, P, pass, bytes); });
}

SpTraffic wallfacer_traffic_total(const AttentionDims& dims, int P, int C, Pass pass, const ElementBytes& bytes,
                                  BackwardKv backward_kv, int hops) {
  return sum_over_ranks(P, [&](int l) { return wallfacer_traffic(dims, P, C, l, pass, bytes, backward_kv, hops); });
}

namespace {
bool is_sp_group(const std::string& name) { return name == "sp" || name.rfind("sp.", 0) == 0; }
}  // namespace

SpTraffic measured_sp_traffic() {
  const comm::TrafficRegistry& registry = comm::TrafficRegistry::instance();
  SpTraffic t;
  for (const auto& [name, traffic] : registry.snapshot(/*p2p_only=*/true, false)) {
    if (!is_sp_group(name)) continue;
    t.p2p_sent += traffic.bytes_sent;
    t.p2p_received += traffic.bytes_received;
  }
  for (const auto& [name, traffic] : registry.snapshot(false, /*collectives_only=*/true)) {
    if (!is_sp_group(name)) continue;
    t.collective_sent += traffic.bytes_sent;
    t.collective_received += traffic.bytes_received;
  }
  return t;
}

SpTraffic sum_over_ranks(comm::Group& group, const SpTraffic& mine) {
  const comm::Traffic p2p = comm::sum_over_ranks(group, {0, mine.p2p_sent, 0, mine.p2p_received});
  const comm::Traffic coll = comm::sum_over_ranks(group, {0, mine.collective_sent, 0, mine.collective_received});
  return {p2p.bytes_sent, p2p.bytes_received, coll.bytes_sent, coll.bytes_received};
}

}  // namespace wf::parallel
