#pragma once
// The positions argument rope and split_qkv_rope share (src/ops/rope.cpp, src/ops/qkv_rope.cpp).
#include <cstdint>

#include "wallfacer/core/tensor.h"

namespace wf::ops {

// The (batch, tokens) a rope kernel sees for a tensor of `batch` rows of `tokens` tokens.
struct RopeRows {
  std::int64_t batch;
  std::int64_t tokens;
};

// wf::Error naming `op` unless positions is i64 or i32 and [tokens] or per row [batch, tokens]
// (x_shape: the shape named in the message). Per-row positions (packed documents) rotate the
// tensor as one row of batch · tokens tokens, which it is in memory: every kernel takes them
// without a second form.
RopeRows rope_rows(const char* op, const Tensor& positions, std::int64_t batch, std::int64_t tokens,
                   const Shape& x_shape);

}  // namespace wf::ops
