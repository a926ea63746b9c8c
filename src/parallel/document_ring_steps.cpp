// The steps a K/V ring runs with packed documents (document_ring_steps.h).
#include "wallfacer/parallel/document_ring_steps.h"

#include <algorithm>
#include <cstdint>

#include "wallfacer/core/error.h"

namespace wf::parallel {
namespace {

// The document of one row's boundaries (checked, as AttentionOptions::doc_bounds) holding p.
std::size_t document_of(const std::vector<std::int64_t>& bounds, std::int64_t p) {
  return static_cast<std::size_t>(std::upper_bound(bounds.begin(), bounds.end(), p) - bounds.begin() - 1);
}

// Whether non-empty runs of queries [a, qe) and keys [c, ke) hold a visible pair in one row: the
// same pairs block attention counts (document_pairs), in O(log documents), since a call runs
// once per ring step, rank and run over every row.
bool attend_in_row(TokenRun q, TokenRun kv, bool causal, const std::vector<std::int64_t>& bounds) {
  const std::int64_t a = q.start, qe = q.start + q.length, c = kv.start, ke = kv.start + kv.length;
  if (std::max(a, c) < std::min(qe, ke)) return true;  // a position in both attends to itself
  // Disjoint runs share a document iff the last position of the earlier run and the first of the
  // later one do (documents are intervals). Keys after every query count under the full mask only.
  if (ke <= a) return document_of(bounds, ke - 1) == document_of(bounds, a);
  return !causal && document_of(bounds, qe - 1) == document_of(bounds, c);
}

}  // namespace

bool runs_attend(const std::vector<TokenRun>& q_runs, const std::vector<TokenRun>& kv_runs, bool causal,
                 const DocumentBounds& documents) {
  for (const TokenRun& q : q_runs) {
    for (const TokenRun& kv : kv_runs) {
      if (q.length <= 0 || kv.length <= 0) continue;
      if (documents.empty()) {
        if (block_mask(q, kv, causal) != BlockMask::skip) return true;
        continue;
      }
      for (const std::vector<std::int64_t>& row : documents) {
        if (attend_in_row(q, kv, causal, row)) return true;
      }
    }
  }
  return false;
}

std::vector<int> attending_steps(const std::vector<std::vector<TokenRun>>& runs,
                                 const std::vector<std::vector<RingBlock>>& blocks_by_step, bool causal,
                                 const DocumentBounds& documents) {
  const int steps = static_cast<int>(blocks_by_step.size()), count = static_cast<int>(runs.size());
  for (int s = 0; s < steps; ++s) {
    for (const RingBlock& b : blocks_by_step[static_cast<std::size_t>(s)]) {
      WF_CHECK(b.queries >= 0 && b.keys >= 0 && b.queries < count && b.keys < count,
               "ring steps: block ({}, {}) of step {} names runs outside the {} given", b.queries, b.keys, s, count);
    }
  }
  std::vector<int> out;
  for (int s = 0; s < steps; ++s) {
    bool attends = s == 0 || documents.empty();  // a ring starts at step 0; unpacked, it keeps all
    for (const RingBlock& b : blocks_by_step[static_cast<std::size_t>(s)]) {
      if (attends) break;
      attends = runs_attend(runs[static_cast<std::size_t>(b.queries)], runs[static_cast<std::size_t>(b.keys)],
                            causal, documents);
    }
    if (attends) out.push_back(s);
  }
  return out;
}

std::vector<int> ring_attention_steps(const std::vector<std::vector<TokenRun>>& rank_runs, bool causal,
                                      const DocumentBounds& documents) {
  const int P = static_cast<int>(rank_runs.size());
  std::vector<std::vector<RingBlock>> blocks(static_cast<std::size_t>(P));
  for (int s = 0; s < P; ++s) {
    for (int r = 0; r < P; ++r) blocks[static_cast<std::size_t>(s)].push_back({r, (r - s + P) % P});
  }
  return attending_steps(rank_runs, blocks, causal, documents);
}

std::vector<int> wallfacer_steps(const comm::WallFacerLayout& layout,
                                 const std::vector<std::vector<TokenRun>>& team_runs, Pass pass, bool causal,
                                 const DocumentBounds& documents) {
  const int G = layout.ring_size();
  WF_CHECK(static_cast<int>(team_runs.size()) == layout.num_teams(), "wallfacer ring steps: {} team runs for {} teams",
           team_runs.size(), layout.num_teams());
  std::vector<std::vector<RingBlock>> blocks(static_cast<std::size_t>(G));
  for (int s = 0; s < G; ++s) {
    for (int x = 0; x < layout.ranks(); ++x) {
      const comm::SpPosition p = layout.position(x);
      if (pass == Pass::forward) {
        blocks[static_cast<std::size_t>(s)].push_back({layout.team(x), layout.kv_team_at_step(x, s)});
      } else {  // the bundle of the team s positions back, in this rank's team group
        const int bundle_team = p.team_group * G + (p.ring_pos - s + G) % G;
        blocks[static_cast<std::size_t>(s)].push_back({bundle_team, layout.kv_team_at_step(x, 0)});
      }
    }
  }
  return attending_steps(team_runs, blocks, causal, documents);
}

int ring_hops(const std::vector<int>& steps) {
  WF_CHECK(!steps.empty() && steps.front() == 0, "ring steps must start at step 0");
  return static_cast<int>(steps.size()) - 1;
}

int sp_ring_hops(SpStrategy strategy, SequenceLayout layout, std::int64_t N, int P, int C, int U, bool causal,
                 const DocumentBounds& documents, Pass pass) {
  if (documents.empty()) return kFullRing;
  switch (strategy) {
    case SpStrategy::ring: {
      const auto chunks = document_chunks(layout, documents, N, P, 1);
      std::vector<std::vector<TokenRun>> runs;
      for (int r = 0; r < P; ++r) runs.push_back(rank_tokens(layout, N, P, 1, r, 1, chunks.get()));
      return ring_hops(ring_attention_steps(runs, causal, documents));
    }
    case SpStrategy::ulysses: return kFullRing;
    case SpStrategy::wallfacer:
    case SpStrategy::ulysses_wallfacer: {
      const int u = strategy == SpStrategy::wallfacer ? 1 : U, W = P / u;
      const comm::WallFacerLayout wallfacer(W, C, comm::Placement::collectives_intra);
      const auto chunks = document_chunks(layout, documents, N, P, C, u);
      std::vector<std::vector<TokenRun>> teams;
      for (int t = 0; t < W / C; ++t) teams.push_back(team_tokens(layout, N, W, C, t, chunks.get()));
      return ring_hops(wallfacer_steps(wallfacer, teams, pass, causal, documents));
    }
  }
  return kFullRing;
}

}  // namespace wf::parallel
