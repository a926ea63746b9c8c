#pragma once
// TokenPositions: where the tokens a block sees sit in their sequence, what the position-aware
// layers read and the others pass on: each token's position (RoPE, a learned position table)
// and, for packed documents, the documents of each row (attention keeps them apart,
// AttentionOptions::doc_bounds). A decoder builds one per microbatch from its batch and hands
// the same one to every block, so every pipeline stage and a checkpoint's replay see the same.
#include <utility>

#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/attention.h"

namespace wf::nn {

struct TokenPositions {
  TokenPositions() = default;
  // One document per row, positions shared by the rows: what a block was called with before
  // packing (implicit, so those calls read as they did).
  // NOLINTNEXTLINE(google-explicit-constructor)
  TokenPositions(Tensor shared_positions) : positions(std::move(shared_positions)) {}
  TokenPositions(Tensor row_positions, DocumentBounds row_documents)
      : positions(std::move(row_positions)), documents(std::move(row_documents)) {}

  // [T] i64: the global position of each token, shared by every row (any order: sequence-parallel
  // layouts); or [B, T] i64 per row: with packed documents, each token's position inside its own
  // document (RoPE and learned positions restart per document).
  Tensor positions;
  // Per row, the global cumulative boundaries of the row's documents (data::Batch::doc_bounds);
  // empty: each row is one document.
  DocumentBounds documents;
};

}  // namespace wf::nn
