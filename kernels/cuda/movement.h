#pragma once
// Launchers of the data-movement CUDA kernels (kernels/cuda/movement.cu), for the entries of
// kernels/cuda/movement.cpp: they move bits (any dtype of a supported element size), except the
// Ulysses block copy, which converts among f32, f64 and bf16 as the CPU does. Every launcher
// queues its work on `stream` and returns. Free of fmt (nvcc reads it).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/strided.h"
#include "src/core/cuda/device_error.h"

namespace wf::kernels::cuda {

// dst[i] = src[offset of i] for i < n, elements of elem_size bytes (1, 2, 4 or 8).
void launch_gather(cudaStream_t stream, std::size_t elem_size, std::int64_t n, const StridedLayout<1>& layout,
                   const void* src, void* dst);

// For o < outer: `count` elements from src + (o·src_block + src_start) to dst + (o·dst_block +
// dst_start), elements of elem_size bytes (any size).
void launch_copy_blocks(cudaStream_t stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                        std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                        std::int64_t outer, std::int64_t count);

// out[o, i] = x[o, positions[i]] for x [outer, rows, row_elems] (elements of any size). A
// position outside [0, rows) is reported to `record` as (message, i, position) and its row of
// `out` left as it was.
void launch_select_rows(cudaStream_t stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                        std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                        void* out, detail::DeviceErrorRecord* record, int message);

// ---- the Ulysses block copy (kernels/sp_kernel_args.h UlyssesBlock, in native terms) ----------
enum class BlockElement { f32, f64, bf16 };  // the dtypes that travel
enum class BlockCopy { pack, unpack, unpack_add };

// The tensor token of each of the block's rows: a device list, or (list null) up to
// kMaxBlockRowRuns runs of consecutive tokens passed by value, the common case (the sequence
// side's rows are 0..n-1; the head side's a peer's contiguous pieces of the sequence layout).
constexpr int kMaxBlockRowRuns = 8;
struct BlockRows {
  const std::int64_t* list = nullptr;
  int runs = 0;
  std::int64_t run_end[kMaxBlockRowRuns] = {};    // run r covers block rows [run_end[r-1], run_end[r])
  std::int64_t run_token[kMaxBlockRowRuns] = {};  // the token of run r's first row
};
struct BlockShape {
  BlockElement dtype = BlockElement::f32, wire = BlockElement::f32;
  BlockCopy move = BlockCopy::pack;
  std::int64_t batch = 0, tokens = 0, heads = 0, width = 1;
  bool heads_first = false;
  std::int64_t first_head = 0, block_heads = 0, rows = 0;
};
// Moves the block between `tensor` (aligned to its dtype) and `message` (its first byte: any
// alignment), converting each element as kernels/cpu/sp_attention.cpp's ulysses_block does.
void launch_ulysses_block(cudaStream_t stream, const BlockShape& shape, const BlockRows& rows, void* tensor,
                          void* message);

}  // namespace wf::kernels::cuda
