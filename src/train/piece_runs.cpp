// Pieces of global tensors as runs of consecutive elements (piece_runs.h).
#include "src/train/piece_runs.h"

#include <fmt/format.h>

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wf::train::detail {

PieceLayout PieceLayout::of(const nn::ParameterShard& shard, std::int64_t flat_begin, std::int64_t flat_end) {
  PieceLayout layout;
  layout.global_shape = shard.unpadded_shape();
  if (shard.is_sharded()) {
    layout.dim = shard.dim;
    layout.start = shard.start();
    layout.length = shard.length();
  }
  layout.flat_begin = flat_begin;
  layout.flat_end = flat_end;
  return layout;
}

PieceLayout PieceLayout::whole(const Shape& shape) {
  PieceLayout layout;
  layout.global_shape = shape;
  layout.flat_end = shape_numel(shape);
  return layout;
}

Shape PieceLayout::slice_shape() const {
  Shape shape = global_shape;
  if (dim >= 0) shape[static_cast<std::size_t>(dim)] = length;
  return shape;
}

std::int64_t PieceLayout::slice_numel() const { return shape_numel(slice_shape()); }

std::string layout_str(const PieceLayout& layout) {
  const std::string slice =
      layout.dim < 0 ? fmt::format("whole {}", shape_str(layout.global_shape))
                     : fmt::format("dim {} rows [{}, {}) of {}", layout.dim, layout.start, layout.start + layout.length,
                                   shape_str(layout.global_shape));
  return fmt::format("{}, elements [{}, {})", slice, layout.flat_begin, layout.flat_end);
}

void check_layout(const PieceLayout& layout, const std::string& what) {
  for (const std::int64_t extent : layout.global_shape) {
    WF_CHECK(extent >= 0, "{}: the shape {} has a negative extent", what, shape_str(layout.global_shape));
  }
  const auto rank = static_cast<int>(layout.global_shape.size());
  WF_CHECK(layout.dim >= -1 && layout.dim < rank, "{}: split dim {} is not a dim of {}", what, layout.dim,
           shape_str(layout.global_shape));
  WF_CHECK(layout.dim < 0 || (layout.start >= 0 && layout.length >= 0), "{}: the slice [{}, +{}) is negative", what,
           layout.start, layout.length);
  WF_CHECK(layout.flat_begin >= 0 && layout.flat_begin <= layout.flat_end && layout.flat_end <= layout.slice_numel(),
           "{}: elements [{}, {}) are not within the slice's {}", what, layout.flat_begin, layout.flat_end,
           layout.slice_numel());
}

std::vector<Run> piece_runs(const PieceLayout& layout) {
  std::vector<Run> runs;
  const auto add = [&](std::int64_t global, std::int64_t piece, std::int64_t count) {
    if (count <= 0) return;
    if (!runs.empty() && runs.back().global + runs.back().count == global &&
        runs.back().piece + runs.back().count == piece) {
      runs.back().count += count;
    } else {
      runs.push_back({global, piece, count});
    }
  };
  if (layout.dim < 0) {
    add(layout.flat_begin, 0, layout.numel());
    return runs;
  }
  const auto d = static_cast<std::size_t>(layout.dim);
  std::int64_t inner = 1;
  for (std::size_t i = d + 1; i < layout.global_shape.size(); ++i) inner *= layout.global_shape[i];
  const std::int64_t extent = layout.global_shape[d];
  // Per index of the leading dims the slice is one block of length · inner elements, of which
  // the first `valid` are global elements and the rest padding.
  const std::int64_t block = layout.length * inner;
  const std::int64_t valid = std::clamp<std::int64_t>(extent - layout.start, 0, layout.length) * inner;
  if (block == 0) return runs;
  for (std::int64_t outer = layout.flat_begin / block; outer * block < layout.flat_end; ++outer) {
    const std::int64_t lo = std::max(layout.flat_begin, outer * block);
    const std::int64_t hi = std::min(layout.flat_end, outer * block + valid);
    add((outer * extent + layout.start) * inner + (lo - outer * block), lo - layout.flat_begin, hi - lo);
  }
  return runs;
}

std::int64_t run_elements(const std::vector<Run>& runs) {
  std::int64_t total = 0;
  for (const Run& run : runs) total += run.count;
  return total;
}

std::string tiling_problem(const Shape& shape, const std::vector<PieceLayout>& pieces) {
  std::vector<Run> runs;
  for (const PieceLayout& piece : pieces) {
    for (const Run& run : piece_runs(piece)) runs.push_back(run);
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.global < b.global; });
  std::int64_t next = 0;
  for (const Run& run : runs) {
    if (run.global > next) return fmt::format("elements [{}, {}) are in no piece", next, run.global);
    if (run.global < next) return fmt::format("element {} is in more than one piece", run.global);
    next = run.global + run.count;
  }
  const std::int64_t numel = shape_numel(shape);
  if (next != numel) return fmt::format("elements [{}, {}) are in no piece", next, numel);
  return {};
}

std::vector<Copy> intersect_runs(const std::vector<Run>& stored, const std::vector<Run>& target) {
  std::vector<Copy> copies;
  std::size_t i = 0, j = 0;
  while (i < stored.size() && j < target.size()) {
    const Run& s = stored[i];
    const Run& t = target[j];
    const std::int64_t lo = std::max(s.global, t.global);
    const std::int64_t hi = std::min(s.global + s.count, t.global + t.count);
    if (lo < hi) copies.push_back({s.piece + (lo - s.global), t.piece + (lo - t.global), hi - lo});
    // Advance whichever ends first (both lists are sorted and without overlaps).
    if (s.global + s.count <= t.global + t.count) {
      ++i;
    } else {
      ++j;
    }
  }
  return copies;
}

}  // namespace wf::train::detail
