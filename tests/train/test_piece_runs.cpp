// Pieces of global tensors as runs (src/train/piece_runs.h) against an element-by-element
// reference over random shapes, split dims, parts, padding and flat ranges; and the tiling check
// a save makes of every tensor's pieces.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "train/piece_testing.h"

using Catch::Matchers::Contains;
using namespace wf::train::testing;
namespace detail = wf::train::detail;

namespace {

std::vector<std::int64_t> run_offsets(const detail::PieceLayout& p) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(p.numel()), -1);
  for (const detail::Run& run : detail::piece_runs(p)) {
    for (std::int64_t k = 0; k < run.count; ++k) out[static_cast<std::size_t>(run.piece + k)] = run.global + k;
  }
  return out;
}

}  // namespace

TEST_CASE("piece_runs maps every element of a piece as the element-by-element reference does",
          "[train][piece_runs]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const RandomPiece piece = random_piece(gen);
    const auto layout = detail::PieceLayout::of(piece.shard, piece.flat_begin, piece.flat_end);
    INFO(detail::layout_str(layout));
    REQUIRE(run_offsets(layout) == naive_offsets(layout));
    const auto runs = detail::piece_runs(layout);
    for (std::size_t i = 1; i < runs.size(); ++i) REQUIRE(runs[i - 1].global + runs[i - 1].count <= runs[i].global);  // sorted, disjoint
  }
  // The parts of one split tile their tensor, padding rows dropped; two copies of a part do not.
  const auto shard = [](int index) { return wf::nn::ParameterShard::split_padded("tp", {8, 3}, 0, 4, index, 7); };
  std::vector<detail::PieceLayout> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(detail::PieceLayout::of(shard(i), 0, 6));
  CHECK(detail::tiling_problem({7, 3}, parts).empty());
  parts.push_back(parts[1]);
  CHECK_THAT(detail::tiling_problem({7, 3}, parts), Contains("more than one piece"));
  parts.resize(3);
  CHECK_THAT(detail::tiling_problem({7, 3}, parts), Contains("elements [18, 21) are in no piece"));
}
