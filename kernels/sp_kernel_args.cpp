// The argument check of kernels/sp_kernel_args.h.
#include "kernels/sp_kernel_args.h"

#include "wallfacer/core/error.h"

namespace wf::kernels {

void check_ulysses_block(const UlyssesBlock& block) {
  const auto travels = [](DType d) { return d == DType::f32 || d == DType::f64 || d == DType::bf16; };
  WF_CHECK(travels(block.dtype) && travels(block.wire),
           "ulysses_block: a {} tensor on a {} wire cannot travel; both must be f32, f64 or bf16",
           dtype_name(block.dtype), dtype_name(block.wire));
  WF_CHECK(block.move != BlockMove::unpack_add || block.dtype != DType::bf16,
           "ulysses_block: a sum over kv-head sharers needs an f32 or f64 tensor, got bf16");
  WF_CHECK(block.batch >= 0 && block.tokens >= 0 && block.heads >= 0 && block.width >= 1 && block.first_head >= 0 &&
               block.block_heads >= 0 && block.first_head + block.block_heads <= block.heads,
           "ulysses_block: heads [{}, {}) of a tensor with {} heads (batch {}, tokens {}, width {}) is not a block",
           block.first_head, block.first_head + block.block_heads, block.heads, block.batch, block.tokens,
           block.width);
  for (const std::int64_t row : block.rows) {
    WF_CHECK(row >= 0 && row < block.tokens, "ulysses_block: token {} is outside the tensor's {} tokens", row,
             block.tokens);
  }
}

}  // namespace wf::kernels
