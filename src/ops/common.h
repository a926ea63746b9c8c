#pragma once
// Internal helpers shared by the op implementations in src/ops (not installed, not public):
//   - argument checks whose messages name the op, the shapes and dtypes involved, and the fix;
//   - compute_in(): the one place that turns bf16/f16 into f32 for the kernels and rounds the
//     results back, so that no op repeats the dance;
//   - shape arithmetic for "operate along one dim" ([outer, extent, inner] decomposition);
//   - raw, non-differentiable data movement (permute, broadcast, narrow, scatter into a range)
//     that works for every dtype because it only moves bits.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "wallfacer/autograd/node.h"
#include "wallfacer/core/tensor.h"

namespace wf::ops {

using autograd::TensorList;

// ---- argument checks (each throws wf::Error naming `op`) ------------------------------------
void check_defined(std::string_view op, const Tensor& t, std::string_view arg);
void check_floating(std::string_view op, const Tensor& t, std::string_view arg);
// Defined, same dtype and same device.
void check_same_dtype_device(std::string_view op, const Tensor& a, const Tensor& b);
void check_same_shape(std::string_view op, const Tensor& a, const Tensor& b);
void check_min_dim(std::string_view op, const Tensor& t, std::int64_t min_dim, std::string_view arg);

// ---- the kernel seam ------------------------------------------------------------------------
// Where an op's kernels run: its inputs' device's kernel backend (kernels/backend.h) and that
// device's current stream. Outputs are allocated on device().
struct Kernels {
  kernels::Backend& backend;
  Stream stream;
  Device device() const { return stream.device(); }
  kernels::Backend* operator->() const { return &backend; }
};
// The one place an op chooses its backend: from the device of its defined tensors, which must
// all be on one device, else a wf::Error naming the op, the devices and the fix (`.to(...)`).
Kernels kernels_for(std::string_view op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors);

// ---- compute dtype --------------------------------------------------------------------------
// The dtype the CPU kernels compute in for a floating `dtype`: f64 stays f64; f32, bf16 and f16
// compute in f32. wf::Error naming `op` for integer dtypes.
DType compute_dtype(std::string_view op, DType dtype);

// Runs body(T{}, converted) with T (float or double) the compute type of `dtype` and
// `converted` the inputs with every floating one converted to T (no copy when already T;
// integer and undefined inputs pass through untouched). body returns a Tensor or a TensorList;
// every output in the compute dtype is rounded back to `dtype` (no copy for f32/f64).
template <class Body>
auto compute_in(std::string_view op, DType dtype, const TensorList& inputs, Body&& body) {
  const DType cdt = compute_dtype(op, dtype);
  TensorList converted;
  converted.reserve(inputs.size());
  for (const Tensor& t : inputs) converted.push_back(t.defined() && is_floating(t.dtype()) ? t.to(cdt) : t);
  const auto round_back = [&](const Tensor& t) {
    return (t.defined() && t.dtype() == cdt && cdt != dtype) ? t.to(dtype) : t;
  };
  return dispatch_float(cdt, op, [&](auto tag) {
    auto out = body(tag, static_cast<const TensorList&>(converted));
    if constexpr (std::is_same_v<decltype(out), Tensor>) {
      return round_back(out);
    } else {
      static_assert(std::is_same_v<decltype(out), TensorList>, "compute_in: body must return Tensor or TensorList");
      for (Tensor& t : out) t = round_back(t);
      return out;
    }
  });
}

// ---- shapes ---------------------------------------------------------------------------------
// A row-major shape seen as [outer, extent, inner] around one dim (negative dims count from
// the end): outer = product of the extents before it, inner = product of those after it.
struct DimSplit {
  std::int64_t dim = 0;  // normalised
  std::int64_t outer = 1;
  std::int64_t extent = 1;
  std::int64_t inner = 1;
};
DimSplit split_at_dim(const Shape& shape, std::int64_t dim);
// The shape after reducing `dim` (normalised already): removed, or kept as 1.
Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim);
// `shape` padded with leading 1s to `ndim` dims (ndim >= shape.size()).
Shape right_aligned(const Shape& shape, std::size_t ndim);
// Number of rows of a tensor viewed as [rows, last extent] (1 for a 0-dim tensor).
std::int64_t rows_of(const Shape& shape);

// `dims` with negative entries resolved; wf::Error naming `op` unless it is a permutation of
// 0..ndim-1.
std::vector<std::int64_t> checked_permutation(std::string_view op, const std::vector<std::int64_t>& dims,
                                              const Shape& shape);

// ---- raw data movement (no autograd; any dtype; result is a new contiguous tensor) ----------
// Dim d of the result is dim dims[d] of x (dims a permutation, negative entries allowed).
Tensor permute_copy(const Tensor& x, const std::vector<std::int64_t>& dims);
// Moves `dim` to the end (keeping the order of the rest), and back. Return x itself when dim is
// already last (no copy).
Tensor move_dim_to_last(const Tensor& x, std::int64_t dim);
Tensor move_last_to_dim(const Tensor& x, std::int64_t dim);
// x broadcast to `shape` (NumPy rules; x's shape must broadcast to exactly `shape`).
Tensor broadcast_to(std::string_view op, const Tensor& x, const Shape& shape);
// Elements [start, start + length) of `dim`, copied.
Tensor narrow_copy(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length);
// dst[..., start : start + src.size(dim), ...] = src along `dim` (same dtype, same other extents).
void copy_into_range(Tensor& dst, std::int64_t dim, std::int64_t start, const Tensor& src);

}  // namespace wf::ops
