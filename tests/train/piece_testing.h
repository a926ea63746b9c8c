#pragma once
// Random tensor-parallel pieces and their element-by-element meaning: the reference the piece
// runs (src/train/piece_runs.h) and the distributed checkpoint's loads are checked against.
#include <random>
#include <vector>

#include "src/train/piece_runs.h"  // internal: the mapping under test
#include "wallfacer/core/tensor.h"
#include "wallfacer/nn/parameter_shard.h"

namespace wf::train::testing {

using wf::Shape;
using wf::Tensor;

// The global offset of each element of the piece (-1: padding), one element at a time.
inline std::vector<std::int64_t> naive_offsets(const wf::train::detail::PieceLayout& p) {
  const Shape slice = p.slice_shape();
  std::vector<std::int64_t> out;
  for (std::int64_t e = p.flat_begin; e < p.flat_end; ++e) {
    std::vector<std::int64_t> index(slice.size());
    std::int64_t rest = e;
    for (std::size_t d = slice.size(); d-- > 0;) {
      index[d] = rest % slice[d];
      rest /= slice[d];
    }
    if (p.dim >= 0) index[static_cast<std::size_t>(p.dim)] += p.start;
    std::int64_t global = 0;
    bool padding = false;
    for (std::size_t d = 0; d < slice.size(); ++d) {
      padding = padding || index[d] >= p.global_shape[d];
      global = global * p.global_shape[d] + index[d];
    }
    out.push_back(padding ? -1 : global);
  }
  return out;
}

// A random tensor-parallel piece: shape of 1 to 3 dims, a split dim (or none), parts, padding of
// the split dim, and a flat range of the slice.
struct RandomPiece {
  wf::nn::ParameterShard shard;
  std::int64_t flat_begin, flat_end;
};
inline RandomPiece random_piece(std::mt19937& gen) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  Shape shape(static_cast<std::size_t>(pick(1, 3)));
  for (auto& extent : shape) extent = pick(1, 5);
  RandomPiece piece;
  if (pick(0, 3) == 0) {
    piece.shard = wf::nn::ParameterShard::replicated(shape);
  } else {
    const int dim = pick(0, static_cast<int>(shape.size()) - 1);
    const int parts = pick(1, 4);
    const int index = pick(0, parts - 1);
    const std::int64_t unpadded = shape[static_cast<std::size_t>(dim)];
    Shape padded = shape;
    padded[static_cast<std::size_t>(dim)] = (unpadded + parts - 1) / parts * parts;  // split evenly
    piece.shard = padded[static_cast<std::size_t>(dim)] == unpadded
                      ? wf::nn::ParameterShard::split("tp", padded, dim, parts, index)
                      : wf::nn::ParameterShard::split_padded("tp", padded, dim, parts, index, unpadded);
  }
  const std::int64_t n = wf::shape_numel(piece.shard.local_shape());
  piece.flat_begin = pick(0, static_cast<int>(n));
  piece.flat_end = pick(static_cast<int>(piece.flat_begin), static_cast<int>(n));
  return piece;
}

// The elements of `whole` a target piece holds (padding: 0), element by element.
inline std::vector<float> naive_piece(const Tensor& whole, const RandomPiece& piece) {
  const auto layout = wf::train::detail::PieceLayout::of(piece.shard, piece.flat_begin, piece.flat_end);
  std::vector<float> out;
  for (const std::int64_t g : naive_offsets(layout)) out.push_back(g < 0 ? 0.0f : whole.data<float>()[g]);
  return out;
}

}  // namespace wf::train::testing
