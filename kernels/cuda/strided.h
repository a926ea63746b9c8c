#pragma once
// The index map of the CUDA kernels that walk a row-major output and read operands through
// strides (gather: one operand; binary_broadcast: two), passed to the kernel by value: no
// host → device copy. The host merges the dims first (merge_strided_dims), so equal shapes
// collapse to one dim, a bias to two, and a permute keeps only the dims it really reorders;
// at most kMaxStridedDims dims remain for the kernel. tests/kernels/test_cuda_bit_exact.cpp checks
// the map on the host against a plain multi-index walk. Free of fmt (nvcc reads it).
#include <cstdint>
#include <vector>

#include "src/core/host_device.h"

namespace wf::kernels::cuda {

constexpr int kMaxStridedDims = 8;

// Output element i, row-major over extent[0..ndim), reads operand k at Σ_d index[d]·stride[k][d].
// ndim 0 is a single element at offset 0.
template <int Operands>
struct StridedLayout {
  int ndim = 0;
  std::int64_t extent[kMaxStridedDims] = {};
  std::int64_t stride[Operands][kMaxStridedDims] = {};
};

// The offsets of output element i in each operand.
template <int Operands>
WF_HOST_DEVICE void strided_offsets(const StridedLayout<Operands>& layout, std::int64_t i,
                                    std::int64_t (&offset)[Operands]) {
  for (int k = 0; k < Operands; ++k) offset[k] = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const std::int64_t e = layout.extent[d];
    const std::int64_t index = i % e;
    i /= e;
    for (int k = 0; k < Operands; ++k) offset[k] += index * layout.stride[k][d];
  }
}

// Fills `layout` with the dims of `extent` (strides[k][d] operand k's stride along dim d) after
// dropping extent-1 dims and merging each dim into the one before it where every operand steps
// through both as through one (stride[d-1] == stride[d]·extent[d]). Returns the merged rank; when
// it exceeds kMaxStridedDims `layout` holds only the first kMaxStridedDims and the caller reports
// the shape. Every extent must be >= 1 (the caller returns early on an empty output).
template <int Operands>
int merge_strided_dims(const std::vector<std::int64_t>& extent, const std::vector<std::int64_t> (&strides)[Operands],
                       StridedLayout<Operands>& layout) {
  layout = StridedLayout<Operands>{};
  int ndim = 0;
  std::int64_t last_extent = 0, last_stride[Operands] = {};
  const auto flush = [&] {
    if (ndim < kMaxStridedDims) {
      layout.extent[ndim] = last_extent;
      for (int k = 0; k < Operands; ++k) layout.stride[k][ndim] = last_stride[k];
    }
    ++ndim;
  };
  bool open = false;  // a dim is being merged into last_*
  for (std::size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == 1) continue;  // contributes nothing to any offset
    bool merges = open;
    for (int k = 0; k < Operands && merges; ++k) merges = last_stride[k] == strides[k][d] * extent[d];
    if (merges) {
      last_extent *= extent[d];
      for (int k = 0; k < Operands; ++k) last_stride[k] = strides[k][d];
      continue;
    }
    if (open) flush();
    open = true;
    last_extent = extent[d];
    for (int k = 0; k < Operands; ++k) last_stride[k] = strides[k][d];
  }
  if (open) flush();
  layout.ndim = ndim < kMaxStridedDims ? ndim : kMaxStridedDims;
  return ndim;
}

}  // namespace wf::kernels::cuda
