// The data-movement CUDA kernels (kernels/cuda/movement.h): one thread per element (per word of
// an element) in grid-stride loops; the 2-D block copy goes through cudaMemcpy2DAsync when its
// pitches allow.
#include "kernels/cuda/movement.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/float_bits.h"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// Calls f(Word{}) with the unsigned integer type of elem_size bytes; false for other sizes.
template <class F>
bool with_word(std::size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1: f(std::uint8_t{}); return true;
    case 2: f(std::uint16_t{}); return true;
    case 4: f(std::uint32_t{}); return true;
    case 8: f(std::uint64_t{}); return true;
    default: return false;
  }
}

// ---- gather ------------------------------------------------------------------------------------

template <class Word>
__global__ void gather_kernel(std::int64_t n, StridedLayout<1> layout, const Word* src, Word* dst) {
  WF_GRID_STRIDE_LOOP(i, n) {
    std::int64_t offset[1];
    strided_offsets(layout, i, offset);
    dst[i] = src[offset[0]];
  }
}

// ---- block copy --------------------------------------------------------------------------------

template <class Word>
__global__ void copy_blocks_kernel(const Word* src, std::int64_t src_block, std::int64_t src_start, Word* dst,
                                   std::int64_t dst_block, std::int64_t dst_start, std::int64_t outer,
                                   std::int64_t count) {
  WF_GRID_STRIDE_LOOP(i, outer * count) {
    const std::int64_t o = i / count, c = i % count;
    dst[o * dst_block + dst_start + c] = src[o * src_block + src_start + c];
  }
}

// ---- row selection -----------------------------------------------------------------------------

template <class Word>
__global__ void select_rows_kernel(std::int64_t outer, std::int64_t rows, std::int64_t row_words, const Word* x,
                                   std::int64_t n, const std::int64_t* positions, Word* out,
                                   detail::DeviceErrorRecord* record, int message) {
  WF_GRID_STRIDE_LOOP(t, outer * n * row_words) {
    const std::int64_t e = t % row_words, r = t / row_words;
    const std::int64_t i = r % n, o = r / n;
    const std::int64_t p = positions[i];
    if (p < 0 || p >= rows) {
      if (o == 0 && e == 0) report_device_error(record, message, i, p);
      continue;
    }
    out[t] = x[(o * rows + p) * row_words + e];
  }
}

// ---- Ulysses blocks ----------------------------------------------------------------------------

// The element types that travel, by their storage: bf16 is its 16 bits.
struct F32 {
  using Storage = float;
};
struct F64 {
  using Storage = double;
};
struct BF16 {
  using Storage = std::uint16_t;
};

// wf::to_double and wf::from_double, NaNs converted as x86 converts them (float_bits.h).
template <class Tag>
__device__ __forceinline__ double to_double(typename Tag::Storage x) {
  if constexpr (std::is_same_v<Tag, BF16>) return float_to_double(bf16_bits_to_float(x));
  else if constexpr (std::is_same_v<Tag, F32>) return float_to_double(x);
  else return x;
}
template <class Tag>
__device__ __forceinline__ typename Tag::Storage from_double(double v) {
  if constexpr (std::is_same_v<Tag, BF16>) return double_to_bf16_bits(v);
  else if constexpr (std::is_same_v<Tag, F32>) return double_to_float(v);
  else return v;
}
// One element from From to To, as the CPU's convert<To, From> (kernels/cpu/sp_attention.cpp):
// exact when widening; rounded to nearest even when narrowing, f32 → bf16 directly, anything else
// through double (f64 → bf16 rounds once, through f32 rounded to odd).
template <class To, class From>
__device__ __forceinline__ typename To::Storage convert(typename From::Storage x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (std::is_same_v<From, BF16> && std::is_same_v<To, F32>) return bf16_bits_to_float(x);
  else if constexpr (std::is_same_v<From, F32> && std::is_same_v<To, BF16>) return float_to_bf16_bits(x);
  else return from_double<To>(to_double<From>(x));
}

__device__ __forceinline__ std::int64_t block_row_token(const BlockRows& rows, std::int64_t i) {
  if (rows.list != nullptr) return rows.list[i];
  std::int64_t begin = 0;
  for (int r = 0; r < rows.runs; ++r) {
    if (i < rows.run_end[r]) return rows.run_token[r] + (i - begin);
    begin = rows.run_end[r];
  }
  return -1;  // unreachable: the runs cover every row (built on the host)
}

// Element `at` of the message is (b, rows[i], first_head + hh, c), in that order (UlyssesBlock).
// The message side is read and written byte-wise (memcpy): an element may start at any byte.
template <class Wire, class Elem>
__global__ void ulysses_block_kernel(BlockShape s, BlockRows rows, typename Elem::Storage* tensor,
                                     unsigned char* message) {
  using W = typename Wire::Storage;
  using E = typename Elem::Storage;
  const std::int64_t total = s.batch * s.rows * s.block_heads * s.width;
  WF_GRID_STRIDE_LOOP(at, total) {
    const std::int64_t c = at % s.width;
    std::int64_t r = at / s.width;
    const std::int64_t hh = r % s.block_heads;
    r /= s.block_heads;
    const std::int64_t i = r % s.rows, b = r / s.rows;
    const std::int64_t token = block_row_token(rows, i), head = s.first_head + hh;
    const std::int64_t element = (s.heads_first ? (b * s.heads + head) * s.tokens + token
                                                : ((b * s.tokens + token) * s.heads + head) * s.width) +
                                 c;
    unsigned char* m = message + at * static_cast<std::int64_t>(sizeof(W));
    if (s.move == BlockCopy::pack) {
      const W w = convert<Wire, Elem>(tensor[element]);
      memcpy(m, &w, sizeof w);
      continue;
    }
    W w;
    memcpy(&w, m, sizeof w);
    const E v = convert<Elem, Wire>(w);
    if constexpr (std::is_same_v<Elem, BF16>) {
      tensor[element] = v;  // the host refuses a sum into bf16
    } else {
      tensor[element] = s.move == BlockCopy::unpack_add ? tensor[element] + v : v;
    }
  }
}

template <class F>
void with_block_element(BlockElement e, F&& f) {
  switch (e) {
    case BlockElement::f32: return f(F32{});
    case BlockElement::f64: return f(F64{});
    case BlockElement::bf16: return f(BF16{});
  }
}

}  // namespace

void launch_gather(cudaStream_t stream, std::size_t elem_size, std::int64_t n, const StridedLayout<1>& layout,
                   const void* src, void* dst) {
  with_word(elem_size, [&](auto word) {
    using Word = decltype(word);
    gather_kernel<Word><<<blocks_for(n), kThreads, 0, stream>>>(n, layout, static_cast<const Word*>(src),
                                                                static_cast<Word*>(dst));
    WF_CUDA_CHECK_LAUNCH("gather_kernel");
  });
}

void launch_copy_blocks(cudaStream_t stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                        std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                        std::int64_t outer, std::int64_t count) {
  const auto es = static_cast<std::int64_t>(elem_size);
  const auto* s = static_cast<const unsigned char*>(src) + src_start * es;
  auto* d = static_cast<unsigned char*>(dst) + dst_start * es;
  const std::int64_t width = count * es, spitch = src_block * es, dpitch = dst_block * es;
  if (outer == 1) {
    WF_CUDA_CHECK(cudaMemcpyAsync(d, s, static_cast<std::size_t>(width), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // cudaMemcpy2D takes rows that do not overlap within a pitch, pitches up to
  // cudaDevAttrMaxPitch (2^31 − 1 on every GPU so far); anything else runs the kernel.
  if (spitch >= width && dpitch >= width && spitch <= INT_MAX && dpitch <= INT_MAX) {
    WF_CUDA_CHECK(cudaMemcpy2DAsync(d, static_cast<std::size_t>(dpitch), s, static_cast<std::size_t>(spitch),
                                    static_cast<std::size_t>(width), static_cast<std::size_t>(outer),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const bool launched = with_word(elem_size, [&](auto word) {
    using Word = decltype(word);
    copy_blocks_kernel<Word><<<blocks_for(outer * count), kThreads, 0, stream>>>(
        static_cast<const Word*>(src), src_block, src_start, static_cast<Word*>(dst), dst_block, dst_start, outer,
        count);
    WF_CUDA_CHECK_LAUNCH("copy_blocks_kernel");
  });
  if (!launched) {  // an odd element size: copy its bytes
    copy_blocks_kernel<unsigned char><<<blocks_for(outer * width), kThreads, 0, stream>>>(
        static_cast<const unsigned char*>(src), spitch, src_start * es, static_cast<unsigned char*>(dst), dpitch,
        dst_start * es, outer, width);
    WF_CUDA_CHECK_LAUNCH("copy_blocks_kernel");
  }
}

void launch_select_rows(cudaStream_t stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                        std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                        void* out, detail::DeviceErrorRecord* record, int message) {
  const auto run = [&](auto word, std::int64_t row_words) {
    using Word = decltype(word);
    select_rows_kernel<Word><<<blocks_for(outer * n * row_words), kThreads, 0, stream>>>(
        outer, rows, row_words, static_cast<const Word*>(x), n, positions, static_cast<Word*>(out), record, message);
    WF_CUDA_CHECK_LAUNCH("select_rows_kernel");
  };
  const bool launched = with_word(elem_size, [&](auto word) { run(word, row_elems); });
  if (!launched) run(static_cast<unsigned char>(0), row_elems * static_cast<std::int64_t>(elem_size));
}

void launch_ulysses_block(cudaStream_t stream, const BlockShape& shape, const BlockRows& rows, void* tensor,
                          void* message) {
  const std::int64_t total = shape.batch * shape.rows * shape.block_heads * shape.width;
  with_block_element(shape.wire, [&](auto wire) {
    with_block_element(shape.dtype, [&](auto elem) {
      using Wire = decltype(wire);
      using Elem = decltype(elem);
      ulysses_block_kernel<Wire, Elem><<<blocks_for(total), kThreads, 0, stream>>>(
          shape, rows, static_cast<typename Elem::Storage*>(tensor), static_cast<unsigned char*>(message));
      WF_CUDA_CHECK_LAUNCH("ulysses_block_kernel");
    });
  });
}

}  // namespace wf::kernels::cuda
