// Packed documents (AttentionOptions::doc_bounds) through every sequence-parallel strategy at the
// world size of the run: ring, Ulysses, WallFacer with C = 1 and C = 2 (where C² divides P) and the
// ulysses-wallfacer hybrid (U = 2 where 2 < P is even). Through the shared run_sp_case
// (sp_testing.h): output, lse and dQ, dK, dV against the f64 reference that runs each document
// alone (reference_attention_documents), the traffic counters, forward and backward, equal to
// traffic_model.h with the ring hops of document_ring_steps.h (the K/V and the backward's
// accumulators skip the steps no rank needs), and the ranks' attention work summed equal to the
// documents' pairs (no pair across documents computed). Layouts: one document spanning every
// rank, mixed lengths shorter and longer than a rank's chunk of N/P = 4 tokens, documents of 2
// tokens, a long document before one-token ones, one-token documents, and per-row boundaries
// (B = 2). Causal (zigzag, laid out by the documents' work: sequence_layout.h's
// balanced_chunk_assignment) and full (contiguous). Tiny sizes.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "sp_testing.h"

using wf::DocumentBounds;
using wf::DType;
using wf::parallel::SpStrategy;
using namespace wf::test;

namespace {

// A document of 3N/4 tokens, then N/4 one-token documents.
std::vector<std::int64_t> long_then_one_token(std::int64_t N) {
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t b = 3 * N / 4; b <= N; ++b) bounds.push_back(b);
  return bounds;
}

struct Layout {
  const char* name;
  std::int64_t B;
  DocumentBounds bounds;
};

std::vector<Layout> layouts(std::int64_t N) {
  return {{"one document over every rank", 1, {{0, N}}},
          {"mixed lengths", 1, {packed(N, {3, 1, 2, 9, 5})}},
          {"two-token documents", 1, {packed(N, {2})}},
          // The token zigzag is far from balanced here: the balanced layout must move chunks.
          {"a long document, then one-token ones", 1, {long_then_one_token(N)}},
          {"one-token documents", 1, {packed(N, {1})}},
          {"per-row boundaries", 2, {packed(N, {7, 2}), packed(N, {1, 4, 6})}}};
}

struct StrategyCase {
  SpStrategy strategy;
  int C, U;
};

std::vector<StrategyCase> strategies(int P) {
  std::vector<StrategyCase> out{{SpStrategy::ring, 1, 1}, {SpStrategy::ulysses, 1, 1}, {SpStrategy::wallfacer, 1, 1}};
  if (P % 4 == 0) out.push_back({SpStrategy::wallfacer, 2, 1});
  if (P > 2 && P % 2 == 0) out.push_back({SpStrategy::ulysses_wallfacer, 1, 2});
  return out;
}

}  // namespace

TEST_CASE("sp attention with packed documents: each document alone, every strategy, the skipping traffic formula",
          "[dist][sp_documents]") {
  const int P = runtime().world_size();
  const std::int64_t N = 4 * P;
  int cases = 0, balanced = 0;
  double worst = 0;
  for (const StrategyCase& s : strategies(P)) {
    for (const Layout& l : layouts(N)) {
      for (const bool causal : {true, false}) {
        if (!causal && l.B > 1) continue;  // the full mask once per strategy and layout is enough
        INFO(l.name);
        SpCase c;
        c.strategy = s.strategy;
        c.C = s.C;
        c.U = s.U;
        c.causal = causal;
        c.B = l.B;
        c.h = 2 * P;
        c.h_kv = P;
        c.d = 4;
        c.N = N;
        c.doc_bounds = l.bounds;
        c.seed = 11 + static_cast<std::uint64_t>(cases);
        // Documents inside the chunks need no remote block: no hop in the rings of teams of one
        // (WallFacer with C > 1 meets a team's own K/V at a later step: docs/sequence-parallelism.md §13).
        const bool local = l.bounds == DocumentBounds{packed(N, {1})} || l.bounds == DocumentBounds{packed(N, {2})};
        if (local && s.C == 1 && s.strategy != SpStrategy::ulysses) {
          CHECK(expected_ring_hops(c, P, wf::parallel::Pass::forward) == 0);
          CHECK(expected_ring_hops(c, P, wf::parallel::Pass::backward) == 0);
        }
        // run_sp_case lays the causal cases out by the documents' work (SpShard::for_documents), as
        // the loader does, and checks every rank's work on that layout and no rank busier than
        // under the token zigzag. Count the cases whose layout that changed.
        if (causal && s.strategy != SpStrategy::ulysses &&
            *wf::parallel::document_chunks(wf::parallel::SequenceLayout::zigzag, l.bounds, N, P, s.C, s.U) !=
                wf::parallel::zigzag_chunk_assignment(N, P, s.C, s.U)) {
          ++balanced;
        }
        const SpCaseResult r = run_sp_case(c);
        worst = std::max(worst, r.max_error());
        ++cases;
      }
    }
  }
  if (P > 1) CHECK(balanced > 0);  // one rank holds every chunk: nothing to balance
  if (runtime().rank() == 0) {
    fmt::print("packed documents P = {}: {} cases ({} on a layout balanced by work), worst f64 relative error "
               "{:.1e}\n",
               P, cases, balanced, worst);
  }
}
