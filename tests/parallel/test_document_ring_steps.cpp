// The ring steps a packed-documents call runs (document_ring_steps.h): golden cases written out
// by hand from the layouts of docs/sequence-layout.md §1 (P = 4, N = 16: contiguous ranks of 4
// tokens; zigzag chunks of 2, rank r holding chunks r and 7 − r), and runs_attend against a
// position-by-position reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"
#include "wallfacer/parallel/document_ring_steps.h"
#include "wallfacer/parallel/sequence_layout.h"

using Catch::Contains;
using wf::DocumentBounds;
using wf::comm::Placement;
using wf::comm::WallFacerLayout;
using wf::parallel::Pass;
using wf::parallel::SequenceLayout;
using wf::parallel::TokenRun;
using Steps = std::vector<int>;

namespace {

constexpr std::int64_t kN = 16;

std::vector<std::vector<TokenRun>> ring_runs(SequenceLayout layout, std::int64_t N, int P) {
  std::vector<std::vector<TokenRun>> runs;
  for (int r = 0; r < P; ++r) runs.push_back(wf::parallel::rank_tokens(layout, N, P, 1, r));
  return runs;
}

std::vector<std::vector<TokenRun>> team_runs(SequenceLayout layout, std::int64_t N, int P, int C) {
  std::vector<std::vector<TokenRun>> runs;
  for (int t = 0; t < P / C; ++t) runs.push_back(wf::parallel::team_tokens(layout, N, P, C, t));
  return runs;
}

Steps ring(SequenceLayout layout, bool causal, const DocumentBounds& documents, int P = 4) {
  return wf::parallel::ring_attention_steps(ring_runs(layout, kN, P), causal, documents);
}

Steps wallfacer(SequenceLayout layout, int P, int C, Pass pass, bool causal, const DocumentBounds& documents) {
  const WallFacerLayout w(P, C, Placement::collectives_intra);
  return wf::parallel::wallfacer_steps(w, team_runs(layout, kN, P, C), pass, causal, documents);
}

// 0, then documents of `length` tokens up to kN (the last one cut).
std::vector<std::int64_t> every(std::int64_t length) {
  std::vector<std::int64_t> bounds{0};
  while (bounds.back() < kN) bounds.push_back(std::min(kN, bounds.back() + length));
  return bounds;
}

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("ring steps: unpacked and single-document calls run the whole ring", "[parallel][ring_steps]") {
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    for (const bool causal : {true, false}) {
      CHECK(ring(layout, causal, {}) == Steps{0, 1, 2, 3});
      CHECK(ring(layout, causal, {{0, kN}}) == Steps{0, 1, 2, 3});
      // Two documents of half the sequence: the zigzag's first chunks [0, 8) sit one on each rank.
      CHECK(ring(layout, causal, {{0, 8, kN}}) == (layout == SequenceLayout::contiguous && causal
                                                        ? Steps{0, 1}
                                                        : layout == SequenceLayout::contiguous ? Steps{0, 1, 3}
                                                                                               : Steps{0, 1, 2, 3}));
    }
  }
  CHECK(ring(SequenceLayout::zigzag, true, {every(1)}, 1) == Steps{0});  // P = 1: nothing to send
  CHECK(wf::parallel::ring_hops({0, 1, 2, 3}) == 3);
}

TEST_CASE("ring steps: documents inside the chunks need only step 0", "[parallel][ring_steps]") {
  // Documents of 2 tokens never leave a zigzag chunk of 2 nor a contiguous rank of 4; one-token
  // documents attend to themselves only.
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    for (const bool causal : {true, false}) {
      CHECK(ring(layout, causal, {every(2)}) == Steps{0});
      CHECK(ring(layout, causal, {every(1)}) == Steps{0});
    }
  }
  CHECK(wf::parallel::ring_hops({0}) == 0);
}

TEST_CASE("ring steps: documents across chunk boundaries keep the steps that reach them", "[parallel][ring_steps]") {
  // Contiguous, documents [0,3) [3,6) [6,9) [9,12) [12,15) [15,16): each crosses at most one
  // rank boundary, so a rank needs the keys of ring prev (step 1), and with the full mask ring
  // next's too (step P − 1 = 3).
  CHECK(ring(SequenceLayout::contiguous, true, {every(3)}) == Steps{0, 1});
  CHECK(ring(SequenceLayout::contiguous, false, {every(3)}) == Steps{0, 1, 3});
  // Zigzag, documents of 4: [0,4) has rank 1's queries on rank 0's keys (step 1), [12,16) rank
  // 0's queries on rank 1's keys (step 3); no rank needs the block two steps away.
  CHECK(ring(SequenceLayout::zigzag, true, {every(4)}) == Steps{0, 1, 3});
  // One document over the first chunks of every rank: rank r reads ranks 0 … r − 1.
  CHECK(ring(SequenceLayout::zigzag, true, {{0, 8, 9, kN}}) == Steps{0, 1, 2, 3});
}

TEST_CASE("ring steps: several rows keep the union of their steps", "[parallel][ring_steps]") {
  CHECK(ring(SequenceLayout::contiguous, true, {every(2), every(3)}) == Steps{0, 1});
  CHECK(ring(SequenceLayout::contiguous, false, {every(3), every(1)}) == Steps{0, 1, 3});
  CHECK(ring(SequenceLayout::zigzag, true, {every(1), every(2)}) == Steps{0});
  CHECK(ring(SequenceLayout::zigzag, true, {every(2), {0, kN}}) == Steps{0, 1, 2, 3});
}

TEST_CASE("ring steps: WallFacer's passes have their own steps", "[parallel][ring_steps]") {
  // C = 1 is the ring over teams of one; its forward steps are ring attention's. The backward's
  // bundle of step s comes from s positions back and meets the K/V held here: the keys of
  // ring prev's document are met at step G − 1.
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    for (const DocumentBounds& docs : std::vector<DocumentBounds>{{}, {every(1)}, {every(3)}, {every(4)}, {{0, kN}}}) {
      CHECK(wallfacer(layout, 4, 1, Pass::forward, true, docs) == ring(layout, true, docs));
    }
  }
  CHECK(wallfacer(SequenceLayout::contiguous, 4, 1, Pass::backward, true, {every(3)}) == Steps{0, 3});
  CHECK(wallfacer(SequenceLayout::contiguous, 4, 1, Pass::backward, true, {every(2)}) == Steps{0});
  CHECK(wallfacer(SequenceLayout::contiguous, 4, 1, Pass::backward, true, {}) == Steps{0, 1, 2, 3});
  // C = 2, P = 4: one sub-ring step (G = 1). P = 8: G = 2, and team 1 meets its own K/V at step
  // 1 (kv_team_at_step: ((j − s) mod G)·C + m), so even one-token documents keep both steps.
  CHECK(wallfacer(SequenceLayout::zigzag, 4, 2, Pass::forward, true, {every(1)}) == Steps{0});
  for (const Pass pass : {Pass::forward, Pass::backward}) {
    CHECK(wallfacer(SequenceLayout::zigzag, 8, 2, pass, true, {every(1)}) == Steps{0, 1});
    CHECK(wallfacer(SequenceLayout::zigzag, 8, 2, pass, true, {}) == Steps{0, 1});
  }
}

TEST_CASE("ring steps: runs_attend matches the pairs position by position", "[parallel][ring_steps]") {
  std::mt19937 rng(7);
  const auto random_bounds = [&] {
    std::vector<std::int64_t> bounds{0};
    while (bounds.back() < kN) bounds.push_back(std::min<std::int64_t>(kN, bounds.back() + 1 + rng() % 6));
    return bounds;
  };
  const auto random_runs = [&] {
    std::vector<TokenRun> runs;
    for (int i = 0; i < 2; ++i) {
      const std::int64_t start = rng() % kN;
      runs.push_back({start, static_cast<std::int64_t>(rng() % (kN - start + 1))});  // may be empty
    }
    return runs;
  };
  for (int trial = 0; trial < 1000; ++trial) {
    DocumentBounds rows{random_bounds()};
    if (trial % 3 == 0) rows.push_back(random_bounds());
    const std::vector<TokenRun> q = random_runs(), kv = random_runs();
    const bool causal = trial % 2 == 0;
    bool expected = false;
    for (const std::vector<std::int64_t>& bounds : rows) {
      const auto doc = [&](std::int64_t p) { return std::upper_bound(bounds.begin(), bounds.end(), p); };
      for (const TokenRun& a : q) {
        for (std::int64_t i = a.start; i < a.start + a.length; ++i) {
          for (const TokenRun& b : kv) {
            for (std::int64_t j = b.start; j < b.start + b.length; ++j) {
              expected = expected || (doc(i) == doc(j) && (!causal || j <= i));
            }
          }
        }
      }
    }
    INFO("trial " << trial);
    CHECK(wf::parallel::runs_attend(q, kv, causal, rows) == expected);
  }
}

TEST_CASE("ring steps: bad arguments are refused with their reason", "[parallel][ring_steps]") {
  const std::vector<std::vector<TokenRun>> runs{{{0, 4}}};
  const std::vector<std::vector<wf::parallel::RingBlock>> blocks{{{0, 0}}, {{0, 1}}};
  CHECK_THAT(error_of([&] { wf::parallel::attending_steps(runs, blocks, true, {}); }),
             Contains("block (0, 1) of step 1 names runs outside the 1 given"));
  CHECK_THAT(error_of([] { wf::parallel::ring_hops({}); }), Contains("must start at step 0"));
  const WallFacerLayout w(8, 2, Placement::collectives_intra);
  CHECK_THAT(error_of([&] { wf::parallel::wallfacer_steps(w, {}, Pass::forward, true, {}); }),
             Contains("0 team runs for 4 teams"));
}
