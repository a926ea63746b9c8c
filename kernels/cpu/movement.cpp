// Data movement that only moves bits: the permute/broadcast gather and the 2-D strided block
// copy behind the ops' raw data movement (src/ops/common.h). One instantiation per element
// width serves every dtype.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "kernels/cpu/host_kernels.h"
#include "wallfacer/core/shape.h"

namespace wf::kernels::cpu {
namespace {

// dst (contiguous, out_shape) gathers src[Σ index[d]·src_stride[d]]. Rows of the last dim are the
// unit of work; a unit-stride row is a plain copy.
template <class Word>
void gather_words(const Word* src, const std::vector<std::int64_t>& out_shape,
                  const std::vector<std::int64_t>& src_stride, Word* dst) {
  const std::int64_t n = shape_numel(out_shape);
  if (n == 0) return;
  const std::size_t nd = out_shape.size();
  if (nd == 0) {
    dst[0] = src[0];
    return;
  }
  const std::int64_t cols = out_shape[nd - 1], rows = n / cols, step = src_stride[nd - 1];
#pragma omp parallel for schedule(static) if (n > 32768)
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t rest = r, offset = 0;
    for (std::size_t d = nd - 1; d-- > 0;) {
      offset += (rest % out_shape[d]) * src_stride[d];
      rest /= out_shape[d];
    }
    const Word* s = src + offset;
    Word* o = dst + r * cols;
    if (step == 1) {
      std::copy(s, s + cols, o);
    } else {
      for (std::int64_t j = 0; j < cols; ++j) o[j] = s[j * step];
    }
  }
}

}  // namespace

void gather_elements(std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
                     const std::vector<std::int64_t>& src_stride, void* dst) {
  const auto run = [&](auto word) {
    using W = decltype(word);
    gather_words(static_cast<const W*>(src), out_shape, src_stride, static_cast<W*>(dst));
  };
  switch (elem_size) {
    case 1: run(std::uint8_t{}); break;
    case 2: run(std::uint16_t{}); break;
    case 4: run(std::uint32_t{}); break;
    case 8: run(std::uint64_t{}); break;
    default: WF_FAIL("gather: unsupported element size {}", elem_size);
  }
}

void copy_element_blocks(std::size_t elem_size, const void* src, std::int64_t src_block, std::int64_t src_start,
                         void* dst, std::int64_t dst_block, std::int64_t dst_start, std::int64_t outer,
                         std::int64_t count) {
  if (count == 0) return;
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  for (std::int64_t o = 0; o < outer; ++o) {
    std::memcpy(d + (o * dst_block + dst_start) * elem_size, s + (o * src_block + src_start) * elem_size,
                count * elem_size);
  }
}

}  // namespace wf::kernels::cpu
