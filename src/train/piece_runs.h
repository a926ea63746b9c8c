#pragma once
// Where a checkpoint piece's elements sit in its global tensor (internal): the one mapping that
// the distributed checkpoints' save check, resharding load, `checkpoint info` and `checkpoint
// export` share.
//
// A piece is the elements [flat_begin, flat_end) (row-major) of one tensor-parallel slice: the
// rows [start, start + length) along `dim` of the global tensor, every other dim whole. The
// global tensor is the UNPADDED one; a slice may reach past its extent along `dim` (the padding
// rows of a split vocabulary), and those elements belong to no global element. In the global
// tensor's row-major order a slice is one contiguous block per index of the dims before `dim`,
// so a piece maps to a short list of runs of consecutive elements.
#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/core/shape.h"
#include "wallfacer/nn/parameter_shard.h"

namespace wf::train::detail {

struct PieceLayout {
  Shape global_shape;       // unpadded
  int dim = -1;             // the split dim; -1: the slice is the whole tensor
  std::int64_t start = 0;   // of the slice along dim (padded index space)
  std::int64_t length = 0;  // the slice's extent along dim, padding rows included
  std::int64_t flat_begin = 0;
  std::int64_t flat_end = 0;

  // The piece [flat_begin, flat_end) of `shard` (global shape: shard.unpadded_shape()).
  static PieceLayout of(const nn::ParameterShard& shard, std::int64_t flat_begin, std::int64_t flat_end);
  // All of a `shape` tensor (a version 3 checkpoint's whole tensors, an export).
  static PieceLayout whole(const Shape& shape);
  Shape slice_shape() const;
  std::int64_t slice_numel() const;
  std::int64_t numel() const { return flat_end - flat_begin; }
};

// "dim 0 rows [501, 1002) of [1001, 64], elements [0, 32064)" for messages.
std::string layout_str(const PieceLayout& layout);
// wf::Error naming `what` unless the layout is consistent: dim within the shape, start and
// length non-negative, the flat range within the slice.
void check_layout(const PieceLayout& layout, const std::string& what);

// `count` consecutive elements: from `global` in the global tensor's row-major order, from
// `piece` in the piece's own (0 = its flat_begin).
struct Run {
  std::int64_t global;
  std::int64_t piece;
  std::int64_t count;
};
// The piece's elements as runs, by increasing global offset, adjacent runs merged; padding
// elements are in none.
std::vector<Run> piece_runs(const PieceLayout& layout);
std::int64_t run_elements(const std::vector<Run>& runs);

// "" when the pieces hold every element of their `shape` tensor exactly once; otherwise what is
// missing or doubled (the first global offset affected), for a message.
std::string tiling_problem(const Shape& shape, const std::vector<PieceLayout>& pieces);

// `count` elements from offset `src` of a stored piece to offset `dst` of a target piece.
struct Copy {
  std::int64_t src;
  std::int64_t dst;
  std::int64_t count;
};
// The elements two pieces of one global tensor share (both run lists as piece_runs gives them).
std::vector<Copy> intersect_runs(const std::vector<Run>& stored, const std::vector<Run>& target);

}  // namespace wf::train::detail
