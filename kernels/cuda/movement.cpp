// The CUDA backend's data-movement entries (kernels/cuda/movement.cu holds the kernels): the
// argument checks the CPU makes on the host, the index maps built on the host and passed by
// value, and the launch on the stream.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/movement.h"
#include "kernels/cuda/strided.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/cuda/device_error.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {
namespace {

// The message a position outside the table reports (the CPU's words), registered once per row count.
int select_rows_message(std::int64_t rows) {
  static std::mutex mutex;
  static std::map<std::int64_t, int> ids;
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = ids.find(rows);
  if (it != ids.end()) return it->second;
  const std::string text = fmt::format("select_rows: position {{1}} is outside the {} rows", rows);
  return ids[rows] = detail::register_device_error_message(text.c_str());
}

BlockElement block_element(DType dtype) {
  switch (dtype) {
    case DType::f32: return BlockElement::f32;
    case DType::f64: return BlockElement::f64;
    case DType::bf16: return BlockElement::bf16;
    default: WF_FAIL("ulysses_block (cuda): dtype {} cannot travel (f32, f64 or bf16)", dtype_name(dtype));
  }
}

BlockCopy block_copy(BlockMove move) {
  switch (move) {
    case BlockMove::pack: return BlockCopy::pack;
    case BlockMove::unpack: return BlockCopy::unpack;
    case BlockMove::unpack_add: return BlockCopy::unpack_add;
  }
  WF_FAIL("ulysses_block (cuda): unknown BlockMove {}", static_cast<int>(move));
}

// The block's rows as runs of consecutive tokens (passed to the kernel by value) when there are
// at most kMaxBlockRowRuns of them; nullopt otherwise (the caller uploads the list).
std::optional<BlockRows> row_runs(const std::vector<std::int64_t>& rows) {
  BlockRows runs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i] == rows[i - 1] + 1) {
      runs.run_end[runs.runs - 1] = static_cast<std::int64_t>(i) + 1;
      continue;
    }
    if (runs.runs == kMaxBlockRowRuns) return std::nullopt;
    runs.run_token[runs.runs] = rows[i];
    runs.run_end[runs.runs] = static_cast<std::int64_t>(i) + 1;
    ++runs.runs;
  }
  return runs;
}

}  // namespace

void CudaKernels::gather(const Stream& stream, std::size_t elem_size, const void* src,
                         const std::vector<std::int64_t>& out_shape, const std::vector<std::int64_t>& src_stride,
                         void* dst) {
  WF_CHECK(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8,
           "gather (cuda): unsupported element size {}", elem_size);
  WF_CHECK(src_stride.size() == out_shape.size(), "gather (cuda): {} strides for the {} dims of shape {}",
           src_stride.size(), out_shape.size(), out_shape);
  std::int64_t n = 1;
  for (const std::int64_t e : out_shape) {
    WF_CHECK(e >= 0, "gather (cuda): negative extent in shape {}", out_shape);
    n *= e;
  }
  if (n == 0) return;
  StridedLayout<1> layout;
  const std::vector<std::int64_t> strides[1] = {src_stride};
  const int merged = merge_strided_dims(out_shape, strides, layout);
  WF_CHECK(merged <= kMaxStridedDims,
           "gather (cuda): shape {} with strides {} walks {} independent dims; the kernel walks at most {}",
           out_shape, src_stride, merged, kMaxStridedDims);
  launch_gather(native(stream), elem_size, n, layout, src, dst);
}

void CudaKernels::copy_blocks(const Stream& stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                              std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                              std::int64_t outer, std::int64_t count) {
  WF_CHECK(outer >= 0 && count >= 0 && src_start >= 0 && dst_start >= 0 && src_block >= 0 && dst_block >= 0,
           "copy_blocks (cuda): sizes must be non-negative (outer {}, count {}, blocks {} and {}, starts {} and {})",
           outer, count, src_block, dst_block, src_start, dst_start);
  if (outer == 0 || count == 0) return;
  launch_copy_blocks(native(stream), elem_size, src, src_block, src_start, dst, dst_block, dst_start, outer, count);
}

void CudaKernels::select_rows(const Stream& stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                              std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                              void* out) {
  WF_CHECK(outer >= 0 && rows >= 0 && row_elems >= 0 && n >= 0,
           "select_rows (cuda): sizes must be non-negative (outer {}, rows {}, row elements {}, positions {})", outer,
           rows, row_elems, n);
  if (outer == 0 || n == 0 || row_elems == 0 || elem_size == 0) return;
  const cudaStream_t native_stream = native(stream);
  launch_select_rows(native_stream, elem_size, outer, rows, row_elems, x, n, positions, out,
                     detail::device_error_record(stream.device().index), select_rows_message(rows));
}

void CudaKernels::ulysses_block(const Stream& stream, const UlyssesBlock& block, void* tensor, void* message) {
  check_ulysses_block(block);  // the host knows the shape and the rows: they are checked here, as the CPU does
  BlockShape shape;
  shape.dtype = block_element(block.dtype);
  shape.wire = block_element(block.wire);
  shape.move = block_copy(block.move);
  shape.batch = block.batch;
  shape.tokens = block.tokens;
  shape.heads = block.heads;
  shape.width = block.width;
  shape.heads_first = block.heads_first;
  shape.first_head = block.first_head;
  shape.block_heads = block.block_heads;
  shape.rows = static_cast<std::int64_t>(block.rows.size());
  if (shape.batch * shape.rows * shape.block_heads * shape.width == 0) return;
  const cudaStream_t native_stream = native(stream);
  // The rows travel as kernel parameters when they are a few runs of consecutive tokens (the
  // sequence side's 0..n-1; the head side's peer positions, contiguous pieces of a sequence
  // layout); any other list is uploaded to scratch memory, released in stream order after the kernel.
  if (const std::optional<BlockRows> runs = row_runs(block.rows)) {
    launch_ulysses_block(native_stream, shape, *runs, tensor, message);
    return;
  }
  const detail::CudaScratch list(stream, block.rows.data(), block.rows.size() * sizeof(std::int64_t));
  BlockRows rows;
  rows.list = list.as<std::int64_t>();
  launch_ulysses_block(native_stream, shape, rows, tensor, message);
}

}  // namespace wf::kernels::cuda
