#pragma once
// What the sequence-parallel attention kernels of kernels/backend.h (the "sequence-parallel
// attention" entries) are asked to move, independent of the device: one tensor's block of a
// Ulysses all-to-all message (src/parallel/ulysses_exchange.cpp builds the message from them).
#include <cstdint>
#include <vector>

#include "wallfacer/core/dtype.h"

namespace wf::kernels {

// What a block copy does: round the tensor's elements into the message (pack), or widen the
// message's elements into the tensor, overwriting (unpack) or adding (unpack_add: the sum over
// the ranks that shared a replicated kv head).
enum class BlockMove { pack, unpack, unpack_add };

// One tensor's block of a Ulysses message for one peer: elements (b, rows[i], first_head + hh, c)
// for b < batch, i < rows.size(), hh < block_heads, c < width, in that order, back to back in the
// message in the `wire` dtype. The tensor is [batch, tokens, heads, width], or [batch, heads,
// tokens] (width 1) when heads_first, of `dtype`. dtype and wire are f32, f64 or bf16; a block
// may start at any byte of the message (fields of different widths travel back to back).
struct UlyssesBlock {
  DType dtype = DType::f32, wire = DType::f32;
  std::int64_t batch = 0, tokens = 0, heads = 0, width = 1;
  bool heads_first = false;
  std::int64_t first_head = 0, block_heads = 0;
  std::vector<std::int64_t> rows;  // the tensor's token index of the block's i-th token
  BlockMove move = BlockMove::pack;

  // The tensor element of (b, token, head, 0).
  std::int64_t element(std::int64_t b, std::int64_t token, std::int64_t head) const {
    return heads_first ? (b * heads + head) * tokens + token : ((b * tokens + token) * heads + head) * width;
  }
  // The block's bytes in the message.
  std::int64_t bytes() const {
    return batch * static_cast<std::int64_t>(rows.size()) * block_heads * width *
           static_cast<std::int64_t>(dtype_size(wire));
  }
};
// wf::Error naming the problem unless dtype and wire are f32, f64 or bf16, an add goes into an
// f32 or f64 tensor, the sizes are non-negative and every row and head is inside the tensor.
void check_ulysses_block(const UlyssesBlock& block);

}  // namespace wf::kernels
