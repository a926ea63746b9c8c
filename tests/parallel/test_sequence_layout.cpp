// Sequence layouts, block masks and work balance, checked against the rules of
// wallfacer-algorithm.md ("Sequence layout (data loader)") written out by hand, and against
// plain position-by-position references.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/comm/process_grid.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/parallel/sequence_layout.h"

using Catch::Contains;
using wf::parallel::BlockMask;
using wf::parallel::SequenceLayout;
using wf::parallel::TokenRun;
using Positions = std::vector<std::int64_t>;

namespace {

constexpr SequenceLayout kBothLayouts[] = {SequenceLayout::contiguous, SequenceLayout::zigzag};

// Team sizes that divide P (the layout needs only that; WallFacer also needs C² | P).
std::vector<int> dividing_team_sizes(int P) {
  std::vector<int> sizes;
  for (int C = 1; C <= P; ++C) {
    if (P % C == 0) sizes.push_back(C);
  }
  return sizes;
}

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

Positions range_positions(std::int64_t begin, std::int64_t end) {
  Positions p(static_cast<std::size_t>(end - begin));
  std::iota(p.begin(), p.end(), begin);
  return p;
}

// The positions of whole chunks of `chunk` tokens, concatenated in the given order.
Positions chunk_positions(const std::vector<int>& chunks, std::int64_t chunk) {
  Positions p;
  for (int c : chunks) {
    const Positions part = range_positions(c * chunk, (c + 1) * chunk);
    p.insert(p.end(), part.begin(), part.end());
  }
  return p;
}

}  // namespace

TEST_CASE("sequence layout names round-trip and unknown names are rejected", "[parallel]") {
  for (SequenceLayout layout : kBothLayouts) {
    CHECK(wf::parallel::parse_sequence_layout(wf::parallel::sequence_layout_name(layout)) == layout);
  }
  CHECK_THAT(error_of([] { wf::parallel::parse_sequence_layout("stripe"); }),
             Contains("'stripe'") && Contains("contiguous, zigzag"));
}

TEST_CASE("every token is held by exactly one rank, in maximal runs", "[parallel]") {
  for (int P = 1; P <= 12; ++P) {
    for (int C : dividing_team_sizes(P)) {
      for (SequenceLayout layout : kBothLayouts) {
        const std::int64_t multiple = wf::parallel::sequence_length_multiple(layout, P, C);
        for (std::int64_t N : {multiple, 2 * multiple, 3 * multiple}) {
          INFO("layout " << wf::parallel::sequence_layout_name(layout) << ", N = " << N << ", P = " << P
                         << ", C = " << C);
          std::vector<int> holders(static_cast<std::size_t>(N), 0);
          for (int l = 0; l < P; ++l) {
            const std::vector<TokenRun> runs = wf::parallel::rank_tokens(layout, N, P, C, l);
            const Positions ids = wf::parallel::position_ids(layout, N, P, C, l);
            REQUIRE(static_cast<std::int64_t>(ids.size()) == N / P);
            CHECK(ids == wf::parallel::run_positions(runs));
            CHECK(runs.size() <= (layout == SequenceLayout::contiguous ? 1u : 2u));
            for (std::size_t i = 0; i + 1 < runs.size(); ++i) {
              CHECK(runs[i].start + runs[i].length != runs[i + 1].start);  // maximal: touching runs merge
            }
            for (std::int64_t p : ids) holders[static_cast<std::size_t>(p)] += 1;
          }
          CHECK(std::all_of(holders.begin(), holders.end(), [](int n) { return n == 1; }));
        }
      }
    }
  }
}

TEST_CASE("contiguous: rank l holds [l·N/P, (l+1)·N/P) whatever C is", "[parallel]") {
  for (int P : {1, 4, 6, 8, 9}) {
    for (int C : dividing_team_sizes(P)) {
      const std::int64_t N = 3 * P;
      for (int l = 0; l < P; ++l) {
        CHECK(wf::parallel::rank_tokens(SequenceLayout::contiguous, N, P, C, l) ==
              std::vector<TokenRun>{{l * N / P, N / P}});
      }
      for (int t = 0; t < P / C; ++t) {
        CHECK(wf::parallel::team_tokens(SequenceLayout::contiguous, N, P, C, t) ==
              std::vector<TokenRun>{{t * C * N / P, C * N / P}});
      }
    }
  }
}

TEST_CASE("zigzag with C = 1 is the usual {r, 2P-1-r} chunk pairing", "[parallel]") {
  for (int P : {1, 2, 3, 4, 7, 8}) {
    for (std::int64_t chunk : {1, 3}) {
      const std::int64_t N = 2 * P * chunk;
      for (int r = 0; r < P; ++r) {
        CHECK(wf::parallel::position_ids(SequenceLayout::zigzag, N, P, 1, r) ==
              chunk_positions({r, 2 * P - 1 - r}, chunk));
      }
    }
  }
}

TEST_CASE("zigzag teams hold chunks t and 2T-1-t and members split them in order", "[parallel]") {
  for (int P = 1; P <= 12; ++P) {
    for (int C : dividing_team_sizes(P)) {
      const int T = P / C;
      const std::int64_t N = 2 * wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, P, C);
      const std::int64_t chunk = N / (2 * T);
      for (int t = 0; t < T; ++t) {
        INFO("P = " << P << ", C = " << C << ", team " << t);
        const Positions team = chunk_positions({t, 2 * T - 1 - t}, chunk);
        CHECK(wf::parallel::run_positions(wf::parallel::team_tokens(SequenceLayout::zigzag, N, P, C, t)) == team);
        CHECK(wf::parallel::zigzag_team_chunks(P, C, t) == std::vector<int>{t, 2 * T - 1 - t});
        Positions members;  // the team all-gather concatenates the members in member order
        for (int m = 0; m < C; ++m) {
          const Positions mine = wf::parallel::position_ids(SequenceLayout::zigzag, N, P, C, t * C + m);
          members.insert(members.end(), mine.begin(), mine.end());
        }
        CHECK(members == team);
      }
    }
  }
}

TEST_CASE("the algorithm doc's P = 8, C = 2 layout, and a straddling P = 9, C = 3 one", "[parallel]") {
  // N = 32: 8 chunks of 4 tokens, team t = chunks {t, 7 - t}, member 0 the first, member 1 the second.
  const std::vector<std::vector<TokenRun>> zigzag = {{{0, 4}},  {{28, 4}}, {{4, 4}},  {{24, 4}},
                                                     {{8, 4}},  {{20, 4}}, {{12, 4}}, {{16, 4}}};
  for (int l = 0; l < 8; ++l) {
    CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, 32, 8, 2, l) == zigzag[static_cast<std::size_t>(l)]);
    CHECK(wf::parallel::rank_tokens(SequenceLayout::contiguous, 32, 8, 2, l) == std::vector<TokenRun>{{4 * l, 4}});
  }
  CHECK(wf::parallel::team_tokens(SequenceLayout::zigzag, 32, 8, 2, 3) == std::vector<TokenRun>{{12, 8}});
  CHECK(wf::parallel::team_tokens(SequenceLayout::zigzag, 32, 8, 2, 1) == std::vector<TokenRun>{{4, 4}, {24, 4}});

  // N = 18: 6 chunks of 3 tokens; member 1 of teams 0 and 1 straddles its team's two chunks.
  const std::vector<Positions> straddle = {{0, 1}, {2, 15}, {16, 17}, {3, 4}, {5, 12},
                                           {13, 14}, {6, 7}, {8, 9},  {10, 11}};
  for (int l = 0; l < 9; ++l) {
    CHECK(wf::parallel::position_ids(SequenceLayout::zigzag, 18, 9, 3, l) == straddle[static_cast<std::size_t>(l)]);
  }
  CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, 18, 9, 3, 1) == std::vector<TokenRun>{{2, 1}, {15, 1}});
}

TEST_CASE("sequence lengths that do not split name N, P, C, the layout and the nearest valid N", "[parallel]") {
  CHECK(wf::parallel::sequence_length_multiple(SequenceLayout::contiguous, 8, 2) == 8);
  CHECK(wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, 8, 1) == 16);
  CHECK(wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, 8, 2) == 8);
  CHECK(wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, 9, 3) == 18);
  CHECK(wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, 16, 4) == 16);

  CHECK_THAT(error_of([] { wf::parallel::rank_tokens(SequenceLayout::zigzag, 100, 8, 2, 0); }),
             Contains("zigzag") && Contains("N = 100") && Contains("P = 8") && Contains("C = 2") &&
                 Contains("nearest valid N: 96 or 104"));
  CHECK_THAT(error_of([] { wf::parallel::rank_tokens(SequenceLayout::zigzag, 24, 8, 1, 0); }),
             Contains("N = 24") && Contains("nearest valid N: 16 or 32"));
  CHECK_THAT(error_of([] { wf::parallel::rank_tokens(SequenceLayout::contiguous, 4, 8, 1, 0); }),
             Contains("contiguous") && Contains("N = 4") && Contains("nearest valid N: 8"));
  CHECK_THAT(error_of([] { wf::parallel::check_sequence_length(SequenceLayout::zigzag, 0, 4, 1); }),
             Contains("N = 0") && Contains("nearest valid N: 8"));
  CHECK_THAT(error_of([] { wf::parallel::rank_tokens(SequenceLayout::zigzag, 36, 6, 4, 0); }),
             Contains("C = 4") && Contains("divide P = 6"));
  CHECK_THAT(error_of([] { wf::parallel::rank_tokens(SequenceLayout::zigzag, 32, 8, 2, 8); }),
             Contains("logical sp index 8"));
  CHECK_THAT(error_of([] { wf::parallel::team_tokens(SequenceLayout::zigzag, 32, 8, 2, 4); }), Contains("team 4"));
}

TEST_CASE("shard then unshard is the identity and shards hold the rows of their position ids", "[parallel]") {
  struct Case {
    wf::Shape shape;
    wf::DType dtype;
    int P, C;
  };
  const Case cases[] = {{{2, 16, 3}, wf::DType::f32, 8, 2},
                        {{1, 18, 2, 2}, wf::DType::f32, 9, 3},
                        {{3, 16}, wf::DType::f64, 4, 1},
                        {{2, 24, 5}, wf::DType::bf16, 6, 3}};
  for (const Case& c : cases) {
    const wf::Tensor global = wf::Tensor::randn_at(c.shape, 7, 0, wf::DType::f32).to(c.dtype);
    const std::int64_t N = c.shape[1], row = global.numel() / (c.shape[0] * N);
    for (SequenceLayout layout : kBothLayouts) {
      INFO(wf::parallel::sequence_layout_name(layout) << " P = " << c.P << " C = " << c.C);
      std::vector<wf::Tensor> locals;
      for (int l = 0; l < c.P; ++l) {
        const wf::Tensor local = wf::parallel::shard_sequence(global, layout, c.P, c.C, l);
        wf::Shape expected = c.shape;
        expected[1] = N / c.P;
        REQUIRE(local.shape() == expected);
        REQUIRE(local.dtype() == c.dtype);
        const Positions ids = wf::parallel::position_ids(layout, N, c.P, c.C, l);
        for (std::int64_t b = 0; b < c.shape[0]; ++b) {
          for (std::size_t i = 0; i < ids.size(); ++i) {
            for (std::int64_t f = 0; f < row; ++f) {
              CHECK(local.at((b * (N / c.P) + static_cast<std::int64_t>(i)) * row + f) ==
                    global.at((b * N + ids[i]) * row + f));
            }
          }
        }
        locals.push_back(local);
      }
      const wf::Tensor back = wf::parallel::unshard_sequence(locals, layout, c.P, c.C);
      REQUIRE(back.shape() == global.shape());
      CHECK(back.to_vector<double>() == global.to_vector<double>());
    }
  }
}

TEST_CASE("shard and unshard reject tensors they cannot split", "[parallel]") {
  const wf::Tensor global = wf::Tensor::zeros({2, 20, 3});
  CHECK_THAT(error_of([&] { wf::parallel::shard_sequence(global, SequenceLayout::zigzag, 8, 2, 0); }),
             Contains("N = 20") && Contains("nearest valid N: 16 or 24"));
  CHECK_THAT(error_of([] { wf::parallel::shard_sequence(wf::Tensor::zeros({16}), SequenceLayout::zigzag, 8, 2, 0); }),
             Contains("[B, N, ...]") && Contains("[16]"));
  const std::vector<wf::Tensor> two = {wf::Tensor::zeros({1, 4}), wf::Tensor::zeros({1, 4})};
  CHECK_THAT(error_of([&] { wf::parallel::unshard_sequence(two, SequenceLayout::contiguous, 4, 1); }),
             Contains("2 local tensors for P = 4"));
  CHECK_THAT(error_of([] { wf::parallel::unshard_sequence({}, SequenceLayout::contiguous, 0, 1); }),
             Contains("0 local tensors for P = 0"));
  const std::vector<wf::Tensor> mixed = {wf::Tensor::zeros({1, 4}), wf::Tensor::zeros({1, 5})};
  CHECK_THAT(error_of([&] { wf::parallel::unshard_sequence(mixed, SequenceLayout::contiguous, 2, 1); }),
             Contains("rank 1 holds f32 [1, 5]"));
}

TEST_CASE("block masks follow the chunk rules and agree with the exact pair counts", "[parallel]") {
  using wf::parallel::block_mask;
  CHECK(block_mask({8, 4}, {8, 4}, true) == BlockMask::causal);  // diagonal chunk pair
  CHECK(block_mask({12, 4}, {0, 4}, true) == BlockMask::full);   // query chunk after key chunk
  CHECK(block_mask({0, 4}, {12, 4}, true) == BlockMask::skip);   // query chunk before key chunk
  CHECK(block_mask({0, 4}, {12, 4}, false) == BlockMask::full);
  CHECK(block_mask({4, 4}, {0, 5}, true) == BlockMask::full);    // last key == first query
  CHECK(block_mask({0, 4}, {2, 4}, true) == BlockMask::causal);  // shifted overlap
  CHECK(block_mask({0, 0}, {0, 4}, true) == BlockMask::skip);
  CHECK(wf::parallel::block_mask_name(BlockMask::causal) == "causal");

  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> start(0, 40), length(1, 12);
  for (int trial = 0; trial < 500; ++trial) {
    const TokenRun q{start(rng), length(rng)}, k{start(rng), length(rng)};
    const std::int64_t pairs = wf::parallel::unmasked_pairs(wf::parallel::run_positions({q}),
                                                            wf::parallel::run_positions({k}), true);
    const BlockMask expected = pairs == 0 ? BlockMask::skip : pairs == q.length * k.length ? BlockMask::full
                                                                                             : BlockMask::causal;
    CHECK(block_mask(q, k, true) == expected);
  }
}

TEST_CASE("unmasked pairs: the run closed form equals the position-by-position count", "[parallel]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> start(0, 60), length(0, 9);
  std::uniform_int_distribution<int> count(0, 4);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<TokenRun> q, k;  // arbitrary order, overlaps allowed
    for (int i = count(rng); i > 0; --i) q.push_back({start(rng), length(rng)});
    for (int i = count(rng); i > 0; --i) k.push_back({start(rng), length(rng)});
    const Positions qp = wf::parallel::run_positions(q), kp = wf::parallel::run_positions(k);
    for (bool causal : {true, false}) {
      std::int64_t reference = 0;  // the definition, one pair at a time
      for (std::int64_t a : qp) {
        for (std::int64_t b : kp) reference += (!causal || b <= a) ? 1 : 0;
      }
      CHECK(wf::parallel::unmasked_pairs(q, k, causal) == reference);
      CHECK(wf::parallel::unmasked_pairs(qp, kp, causal) == reference);
    }
  }
}

TEST_CASE("causal zigzag: every rank does 4·G half blocks; the paper's drawn pairing does not", "[parallel]") {
  for (int P : {1, 2, 4, 8, 9, 12, 16, 18, 27, 32, 36, 64}) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      const int G = P / (C * C);
      for (int l = 0; l < P; ++l) {
        INFO("P = " << P << ", C = " << C << ", rank " << l);
        CHECK(wf::parallel::wallfacer_rank_work_half_blocks(P, C, l) == 4 * G);
      }
    }
  }
  // The paper's Fig. 6 (P = 8, C = 2) draws teams {x0, x7}, {x1, x6}, {x3, x5}, {x2, x4}.
  const std::vector<std::vector<int>> drawn = {{0, 7}, {1, 6}, {3, 5}, {2, 4}};
  std::vector<std::int64_t> loads;
  for (int l = 0; l < 8; ++l) loads.push_back(wf::parallel::wallfacer_rank_work_half_blocks(8, 2, l, drawn));
  CHECK(loads == std::vector<std::int64_t>{8, 8, 8, 8, 8, 10, 6, 8});  // blocks 4,4,4,4,4,5,3,4
  CHECK(wf::parallel::causal_half_blocks({0, 7}, {0, 7}) == 4);
  CHECK_THAT(error_of([] { wf::parallel::wallfacer_rank_work_half_blocks(8, 2, 0, {{0, 7}}); }),
             Contains("1 team chunk lists for T = P/C = 4 teams"));
  CHECK_THAT(error_of([] { wf::parallel::wallfacer_rank_work_half_blocks(8, 4, 0); }), Contains("C = 4"));
}

TEST_CASE("causal zigzag at token level: the one excess is the diagonal, 1/(2·G·chunk)", "[parallel]") {
  for (int P : {1, 2, 4, 8, 9, 16, 18}) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      const int T = P / C, G = P / (C * C);
      const wf::comm::WallFacerLayout grid(P, C, wf::comm::Placement::collectives_intra);
      for (std::int64_t factor : {1, 3}) {
        const std::int64_t N = factor * wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, P, C);
        const std::int64_t chunk = N / (2 * T), base = 2 * chunk * chunk * G;
        std::int64_t total = 0;
        std::vector<int> excess_members(static_cast<std::size_t>(T), 0);
        for (int l = 0; l < P; ++l) {
          INFO("P = " << P << ", C = " << C << ", N = " << N << ", rank " << l);
          const std::int64_t work = wf::parallel::wallfacer_rank_work_pairs(SequenceLayout::zigzag, N, P, C, l, true);
          bool meets_own_team = false;
          for (int step = 0; step < G; ++step) meets_own_team |= grid.kv_team_at_step(l, step) == l / C;
          CHECK(work == base + (meets_own_team ? chunk : 0));
          if (meets_own_team) {
            CHECK((work - base) * 2 * G * chunk == base);  // relative excess exactly 1/(2·G·chunk)
            excess_members[static_cast<std::size_t>(l / C)] += 1;
          }
          total += work;
        }
        CHECK(total == N * (N + 1) / 2);
        CHECK(std::all_of(excess_members.begin(), excess_members.end(), [](int n) { return n == 1; }));
      }
    }
  }
}

TEST_CASE("ring and full-mask work: zigzag ring balanced, contiguous causal ring not, full mask N²/P", "[parallel]") {
  for (int P : {1, 2, 3, 4, 8}) {
    const std::int64_t N = 6 * P, chunk = N / (2 * P);
    for (int r = 0; r < P; ++r) {
      CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::zigzag, N, P, r, true) == 2 * chunk * chunk * P + chunk);
      CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::contiguous, N, P, r, false) == N * N / P);
      // Contiguous causal: rank r's block of n queries sees the r·n keys before it and its own triangle.
      const std::int64_t n = N / P;
      CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::contiguous, N, P, r, true) ==
            n * r * n + n * (n + 1) / 2);
    }
  }
  for (int P : {4, 8, 16}) {
    for (int C : wf::comm::valid_team_sizes(P)) {
      const std::int64_t N = 4 * P;
      for (int l = 0; l < P; ++l) {
        for (SequenceLayout layout : kBothLayouts) {
          CHECK(wf::parallel::wallfacer_rank_work_pairs(layout, N, P, C, l, false) == N * N / P);
        }
      }
    }
  }
}

// ---- the ulysses-wallfacer hybrid (U > 1) ----------------------------------------------------

TEST_CASE("hybrid layout: each WallFacer shard's storage split over its U Ulysses ranks, every token once",
          "[parallel][ulysses_wallfacer]") {
  for (int P : {4, 6, 8, 12, 16}) {
    for (int U = 1; U <= P; ++U) {
      if (P % U != 0) continue;
      for (int C : dividing_team_sizes(P / U)) {
        for (SequenceLayout layout : kBothLayouts) {
          const std::int64_t multiple = wf::parallel::sequence_length_multiple(layout, P, C, U);
          if (U > 1) CHECK(multiple == (layout == SequenceLayout::contiguous ? P : 2 * P));
          const int W = P / U;
          for (std::int64_t N : {multiple, 3 * multiple}) {
            INFO(wf::parallel::sequence_layout_name(layout) << " N = " << N << " P = " << P << " U = " << U
                                                            << " C = " << C);
            std::vector<int> holders(static_cast<std::size_t>(N), 0);
            for (int s = 0; s < W; ++s) {
              // The shard the all-to-all gathers, in storage order: its U parts at their storage indices.
              const Positions shard = wf::parallel::position_ids(layout, N, W, C, s);
              Positions gathered(shard.size(), -1);
              for (int u = 0; u < U; ++u) {
                const Positions mine = wf::parallel::position_ids(layout, N, P, C, s * U + u, U);
                REQUIRE(static_cast<std::int64_t>(mine.size()) == N / P);
                // U = 1: the whole shard in order (N/W need not split into two chunks then).
                const Positions at =
                    U == 1 ? range_positions(0, N / W) : wf::parallel::position_ids(layout, N / W, U, 1, u);
                for (std::size_t i = 0; i < mine.size(); ++i) {
                  gathered[static_cast<std::size_t>(at[i])] = mine[i];
                  holders[static_cast<std::size_t>(mine[i])] += 1;
                }
              }
              CHECK(gathered == shard);
            }
            CHECK(std::all_of(holders.begin(), holders.end(), [](int n) { return n == 1; }));
          }
        }
      }
    }
  }
}

TEST_CASE("hybrid layout: U = 1 is WallFacer's, U = P Ulysses', contiguous is contiguous over P",
          "[parallel][ulysses_wallfacer]") {
  const std::int64_t N = 96;
  for (int l = 0; l < 8; ++l) {
    CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 8, 2, l, 1) ==
          wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 8, 2, l));
    CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 8, 1, l, 8) ==
          wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 8, 1, l));
    CHECK(wf::parallel::rank_tokens(SequenceLayout::contiguous, N, 8, 2, l, 2) ==
          wf::parallel::rank_tokens(SequenceLayout::contiguous, N, 8, 1, l));
  }
  // P = 8, U = 2, C = 2, N = 32: in WallFacer's P = 4, C = 2 zigzag team 0 holds chunks 0 and 3
  // of 4 ([0, 8) and [24, 32)) and its member 1 (shard 1) the second half of that storage,
  // [24, 32); the shard's two Ulysses ranks (l = 2, 3) hold its storage chunks {0, 3} and {1, 2}
  // of 4 (2 tokens each).
  CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, 32, 8, 2, 2, 2) ==
        std::vector<TokenRun>{{24, 2}, {30, 2}});
  CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, 32, 8, 2, 3, 2) == std::vector<TokenRun>{{26, 4}});
  CHECK_THAT(error_of([] { wf::parallel::check_sequence_length(SequenceLayout::zigzag, 100, 4, 1, 2); }),
             Contains("N = 100 tokens cannot be split over P = 4 ranks as U = 2 Ulysses ranks times P/U = 2 "
                      "WallFacer ranks in teams of C = 1: it needs N divisible by 8") &&
                 Contains("nearest valid N: 96 or 104"));
  CHECK_THAT(error_of([] { (void)wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, 8, 1, 3); }),
             Contains("the Ulysses degree U = 3 must be >= 1 and divide P = 8"));
  // shard / unshard with U: the identity.
  const wf::Tensor global = wf::Tensor::randn_at({2, 32, 3}, 5, 0);
  std::vector<wf::Tensor> locals;
  for (int l = 0; l < 8; ++l) {
    locals.push_back(wf::parallel::shard_sequence(global, SequenceLayout::zigzag, 8, 2, l, 2));
  }
  CHECK(wf::parallel::unshard_sequence(locals, SequenceLayout::zigzag, 8, 2, 2).to_vector<float>() ==
        global.to_vector<float>());
}

// ---- packed documents: the zigzag balanced by attention work -----------------------------------

namespace {

using wf::DocumentBounds;
using wf::parallel::ChunkAssignment;

// 0, then lengths cycling through `lengths` until N (the last one cut at N).
std::vector<std::int64_t> packed_bounds(std::int64_t N, const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> bounds{0};
  for (std::size_t i = 0; bounds.back() < N; ++i) {
    bounds.push_back(std::min(N, bounds.back() + lengths[i % lengths.size()]));
  }
  return bounds;
}

// Every (P, C, U) of the layouts up to 8 ranks, with C dividing the P/U WallFacer ranks.
struct Split {
  int P, C, U;
};
std::vector<Split> splits() {
  std::vector<Split> out;
  for (int P : {1, 2, 4, 6, 8}) {
    for (int U = 1; U <= P; ++U) {
      if (P % U != 0) continue;
      for (int C : dividing_team_sizes(P / U)) out.push_back({P, C, U});
    }
  }
  return out;
}

// Every chunk of the assignment once, the same count per team, ascending.
void check_partition(const ChunkAssignment& a, std::int64_t N, int T, int g) {
  REQUIRE(static_cast<int>(a.team_chunks.size()) == T);
  CHECK(a.chunk_tokens * 2 * T * g == N);
  std::vector<int> all;
  for (const auto& team : a.team_chunks) {
    CHECK(static_cast<int>(team.size()) == 2 * g);
    CHECK(std::is_sorted(team.begin(), team.end()));
    all.insert(all.end(), team.begin(), team.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected(static_cast<std::size_t>(2 * T * g));
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(all == expected);
}

std::vector<std::int64_t> team_work(const ChunkAssignment& a, const std::vector<std::int64_t>& chunk_work) {
  std::vector<std::int64_t> out;
  for (const auto& team : a.team_chunks) {
    std::int64_t w = 0;
    for (int c : team) w += chunk_work[static_cast<std::size_t>(c)];
    out.push_back(w);
  }
  return out;
}

}  // namespace

TEST_CASE("balanced layout: chunks per pair is the largest of 64, ..., 1 that keeps N valid and chunks of 64 tokens",
          "[parallel][layout_balance]") {
  CHECK(wf::parallel::chunks_per_pair(2048, 2, 1) == 8);    // 2T·g = 32 | 2048, chunks of 64
  CHECK(wf::parallel::chunks_per_pair(1024, 2, 1) == 4);    // g = 8 would cut chunks of 32
  CHECK(wf::parallel::chunks_per_pair(512, 2, 1) == 2);     // 2T·g = 8, chunks of 64
  CHECK(wf::parallel::chunks_per_pair(24, 4, 1) == 1);      // 2T = 8 | 24, 16 does not
  CHECK(wf::parallel::chunks_per_pair(2048, 4, 2) == 8);    // T = 2
  CHECK(wf::parallel::chunks_per_pair(65536, 4, 1) == 8);   // C = 1: at most 8
  CHECK(wf::parallel::chunks_per_pair(16384, 4, 2) == 64);  // C > 1: finer
  CHECK(wf::parallel::chunks_per_pair(256, 4, 2) == 1);     // floor: LLaMA-tiny's 256 tokens keep 2T chunks
  CHECK(wf::parallel::chunks_per_pair(1024, 4, 1, 2) == 4);  // W = 2: T = 2, and 2P = 8 | 1024
  CHECK_THAT(error_of([] { (void)wf::parallel::chunks_per_pair(10, 4, 1); }), Contains("nearest valid N"));
}

TEST_CASE("balanced layout: one causal document per row is exactly the token zigzag", "[parallel][layout_balance]") {
  for (const Split& s : splits()) {
    const std::int64_t multiple = wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, s.P, s.C, s.U);
    for (std::int64_t N : {multiple, 3 * multiple, 16 * multiple}) {
      INFO("N = " << N << " P = " << s.P << " C = " << s.C << " U = " << s.U);
      const ChunkAssignment zigzag = wf::parallel::zigzag_chunk_assignment(N, s.P, s.C, s.U);
      for (const DocumentBounds& rows : {DocumentBounds{{0, N}}, DocumentBounds{{0, N}, {0, N}, {0, N}}}) {
        const ChunkAssignment a = wf::parallel::balanced_chunk_assignment(rows, N, s.P, s.C, s.U);
        CHECK(a == zigzag);
        for (int l = 0; l < s.P; ++l) {
          CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, N, s.P, s.C, l, s.U, &a) ==
                wf::parallel::rank_tokens(SequenceLayout::zigzag, N, s.P, s.C, l, s.U));
        }
      }
    }
  }
}

TEST_CASE("balanced layout: a hand-checked assignment (N = 512, P = 2, documents of 384 and 128 tokens)",
          "[parallel][layout_balance]") {
  // g = 2: 8 chunks of 64 tokens. Chunk i of the first document holds queries 64i … 64i + 63, whose
  // keys are the 64i + 1 … 64i + 64 before them: 4096i + 2080 pairs. Works 2080 6176 10272 14368
  // 18464 22560 | 2080 6176. The token zigzag (chunks of 128: team 0 holds tokens 0-127 and
  // 384-511) gives the teams 16512 and 65664; the folded pairs (0,5) (6,4) (1,3) (7,2), of works
  // 24640 20544 20544 16448, dealt heaviest first, give 41088 and 41088 (LPT does too, and loses
  // the tie).
  const DocumentBounds documents{{0, 384, 512}};
  CHECK(wf::parallel::chunk_work_pairs(documents, 512, 8) ==
        std::vector<std::int64_t>{2080, 6176, 10272, 14368, 18464, 22560, 2080, 6176});
  // By keys: key 64i + j of the first document is seen by the 384 − 64i − j queries from it on.
  CHECK(wf::parallel::chunk_key_work_pairs(documents, 512, 8) ==
        std::vector<std::int64_t>{22560, 18464, 14368, 10272, 6176, 2080, 6176, 2080});
  const ChunkAssignment a = wf::parallel::balanced_chunk_assignment(documents, 512, 2, 1);
  CHECK(a == ChunkAssignment{64, {{0, 2, 5, 7}, {1, 3, 4, 6}}});  // 41088 key pairs each too
  CHECK(wf::parallel::rank_tokens(SequenceLayout::zigzag, 512, 2, 1, 0, 1, &a) ==
        std::vector<TokenRun>{{0, 64}, {128, 64}, {320, 64}, {448, 64}});
  CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::zigzag, 512, 2, 0, true, documents, &a) == 41088);
  CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::zigzag, 512, 2, 1, true, documents, &a) == 41088);
  CHECK(wf::parallel::ring_rank_work_pairs(SequenceLayout::zigzag, 512, 2, 0, true, documents) == 8256 + 8256);
  CHECK(wf::parallel::work_imbalance({6, 18}) == Approx(0.5));
  CHECK(wf::parallel::work_imbalance({12, 12}) == 0.0);
}

TEST_CASE("balanced layout: every chunk once, equal counts, every token on one rank, shard and unshard invert",
          "[parallel][layout_balance]") {
  for (const Split& s : splits()) {
    const std::int64_t multiple = wf::parallel::sequence_length_multiple(SequenceLayout::zigzag, s.P, s.C, s.U);
    const std::int64_t N = 16 * multiple;
    INFO("N = " << N << " P = " << s.P << " C = " << s.C << " U = " << s.U);
    const DocumentBounds documents{packed_bounds(N, {5, 1, 17, 3, 40, 2}), packed_bounds(N, {N / 3, 1})};
    const int T = s.P / s.U / s.C, g = wf::parallel::chunks_per_pair(N, s.P, s.C, s.U);
    const ChunkAssignment a = wf::parallel::balanced_chunk_assignment(documents, N, s.P, s.C, s.U);
    check_partition(a, N, T, a == wf::parallel::zigzag_chunk_assignment(N, s.P, s.C, s.U) ? 1 : g);
    std::vector<int> holders(static_cast<std::size_t>(N), 0);
    std::vector<wf::Tensor> locals;
    const wf::Tensor global = wf::Tensor::randn_at({2, N, 3}, 9, 0);
    for (int l = 0; l < s.P; ++l) {
      for (std::int64_t p : wf::parallel::position_ids(SequenceLayout::zigzag, N, s.P, s.C, l, s.U, &a)) {
        holders[static_cast<std::size_t>(p)] += 1;
      }
      locals.push_back(wf::parallel::shard_sequence(global, SequenceLayout::zigzag, s.P, s.C, l, s.U, &a));
    }
    CHECK(std::all_of(holders.begin(), holders.end(), [](int n) { return n == 1; }));
    CHECK(wf::parallel::unshard_sequence(locals, SequenceLayout::zigzag, s.P, s.C, s.U, &a).to_vector<float>() ==
          global.to_vector<float>());
  }
}

TEST_CASE("balanced layout: 36 mixed documents in 64K tokens balance within 5% (C = 1, 2, 4), never worse than the "
          "zigzag",
          "[parallel][layout_balance]") {
  const std::int64_t N = 65536;
  const DocumentBounds documents{packed_bounds(N, {4096, 512, 1536, 256, 3072, 768, 6144, 128, 2048, 1024, 640})};
  const std::int64_t total = wf::parallel::unmasked_pairs({{0, N}}, {{0, N}}, true, documents);
  for (const Split& s : std::vector<Split>{{2, 1, 1}, {4, 1, 1}, {8, 1, 1}, {4, 2, 1}, {8, 2, 1}, {8, 1, 2},
                                           {16, 2, 1}, {16, 4, 1}}) {
    INFO("P = " << s.P << " C = " << s.C << " U = " << s.U);
    const ChunkAssignment a = wf::parallel::balanced_chunk_assignment(documents, N, s.P, s.C, s.U);
    const std::int64_t K = N / a.chunk_tokens;
    const std::vector<std::int64_t> balanced_teams = team_work(a, wf::parallel::chunk_work_pairs(documents, N, K));
    CHECK(std::accumulate(balanced_teams.begin(), balanced_teams.end(), std::int64_t{0}) == total);
    // The ranks' work (WallFacer's, over the P/U WallFacer ranks) sums to the documents' pairs; the
    // busiest rank against the mean. With C = 1 a rank's work is its team's.
    const int W = s.P / s.U;
    std::vector<std::int64_t> balanced_ranks, zigzag_ranks;
    for (int l = 0; l < W; ++l) {
      balanced_ranks.push_back(
          wf::parallel::wallfacer_rank_work_pairs(SequenceLayout::zigzag, N, W, s.C, l, true, documents, &a));
      zigzag_ranks.push_back(
          wf::parallel::wallfacer_rank_work_pairs(SequenceLayout::zigzag, N, W, s.C, l, true, documents));
    }
    CHECK(std::accumulate(balanced_ranks.begin(), balanced_ranks.end(), std::int64_t{0}) == total);
    if (s.C == 1) {
      CHECK(balanced_ranks == balanced_teams);
      // WallFacer's backward works on the K/V's holder: the teams' keys are balanced too.
      const std::vector<std::int64_t> key_teams = team_work(a, wf::parallel::chunk_key_work_pairs(documents, N, K));
      CHECK(std::accumulate(key_teams.begin(), key_teams.end(), std::int64_t{0}) == total);
      CHECK(wf::parallel::work_imbalance(key_teams) < 0.05);
    }
    CHECK(wf::parallel::work_imbalance(balanced_ranks) < 0.05);
    CHECK(wf::parallel::work_imbalance(balanced_ranks) <= wf::parallel::work_imbalance(zigzag_ranks));
  }
}

TEST_CASE("balanced layout: deterministic, one shared list equals equal per-row lists, bad input named",
          "[parallel][layout_balance]") {
  const std::int64_t N = 256;
  const std::vector<std::int64_t> row = packed_bounds(N, {7, 30, 1, 64});
  const ChunkAssignment a = wf::parallel::balanced_chunk_assignment({row}, N, 4, 1);
  CHECK(a == wf::parallel::balanced_chunk_assignment({row}, N, 4, 1));
  CHECK(a == wf::parallel::balanced_chunk_assignment({row, row, row}, N, 4, 1));
  // The rule: the zigzag with documents only.
  CHECK(wf::parallel::document_chunks(SequenceLayout::contiguous, {row}, N, 4, 1) == nullptr);
  // C > 1 (the swaps after the deal) too: the same result from the same input, shared or per row.
  const std::vector<std::int64_t> long_row = packed_bounds(4096, {700, 90, 1500, 33});
  const ChunkAssignment teams = wf::parallel::balanced_chunk_assignment({long_row}, 4096, 8, 2);
  CHECK(teams == wf::parallel::balanced_chunk_assignment({long_row}, 4096, 8, 2));
  CHECK(teams == wf::parallel::balanced_chunk_assignment({long_row, long_row}, 4096, 8, 2));
  CHECK(wf::parallel::document_chunks(SequenceLayout::zigzag, {}, N, 4, 1) == nullptr);
  CHECK(*wf::parallel::document_chunks(SequenceLayout::zigzag, {row}, N, 4, 1) == a);
  wf::parallel::SpShard shard;
  shard.layout = SequenceLayout::zigzag;
  shard.seq_len = N;
  shard.P = 4;
  shard.logical_index = 2;
  CHECK(shard.for_documents({row}).runs() == wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 4, 1, 2, 1, &a));
  shard.balance_documents = false;  // Ulysses
  CHECK(shard.for_documents({row}).runs() == wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 4, 1, 2));

  CHECK_THAT(error_of([&] { (void)wf::parallel::balanced_chunk_assignment({{0, 9, 100}}, N, 4, 1); }),
             Contains("must be the cumulative document boundaries"));
  ChunkAssignment twice = a;
  twice.team_chunks[0][0] = twice.team_chunks[1][0];
  CHECK_THAT(error_of([&] { (void)wf::parallel::rank_tokens(SequenceLayout::zigzag, N, 4, 1, 0, 1, &twice); }),
             Contains("must hold every chunk of N / chunk_tokens once"));
  CHECK_THAT(error_of([&] { (void)wf::parallel::rank_tokens(SequenceLayout::contiguous, N, 4, 1, 0, 1, &a); }),
             Contains("the contiguous layout takes none"));
}
