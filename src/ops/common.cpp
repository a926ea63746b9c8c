#include "src/ops/common.h"

#include <cstring>
#include <numeric>

namespace wf::ops {

// ---- argument checks --------------------------------------------------------------------------
void check_defined(std::string_view op, const Tensor& t, std::string_view arg) {
  WF_CHECK(t.defined(), "{}: {} is an undefined tensor", op, arg);
}

void check_floating(std::string_view op, const Tensor& t, std::string_view arg) {
  check_defined(op, t, arg);
  WF_CHECK(is_floating(t.dtype()), "{}: {} has dtype {}, but a floating dtype (f32, f64, bf16, f16) is needed; "
           "convert it with cast()",
           op, arg, dtype_name(t.dtype()));
}

void check_same_dtype_device(std::string_view op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "the first operand");
  check_defined(op, b, "the second operand");
  WF_CHECK(a.dtype() == b.dtype(),
           "{}: operands have different dtypes, {} (shape {}) and {} (shape {}); convert one with cast()", op,
           dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
  WF_CHECK(a.device() == b.device(),
           "{}: operands are on different devices, {} and {}; move one to the other's device first "
           "(e.g. b.to(Device::parse(\"{}\")))",
           op, a.device().str(), b.device().str(), a.device().str());
}

void check_same_shape(std::string_view op, const Tensor& a, const Tensor& b) {
  WF_CHECK(a.shape() == b.shape(), "{}: shapes {} and {} must be equal", op, shape_str(a.shape()),
           shape_str(b.shape()));
}

void check_min_dim(std::string_view op, const Tensor& t, std::int64_t min_dim, std::string_view arg) {
  WF_CHECK(t.dim() >= min_dim, "{}: {} needs at least {} dims, got shape {}", op, arg, min_dim, shape_str(t.shape()));
}

// ---- compute dtype ----------------------------------------------------------------------------
DType compute_dtype(std::string_view op, DType dtype) {
  switch (dtype) {
    case DType::f64: return DType::f64;
    case DType::f32:
    case DType::bf16:
    case DType::f16: return DType::f32;
    default: break;
  }
  WF_FAIL("{}: dtype {} is not supported (f32, f64, bf16 or f16 expected); convert with cast()", op,
          dtype_name(dtype));
}

// ---- the kernel seam -------------------------------------------------------------------------
Kernels kernels_for(std::string_view op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
    } else {
      WF_CHECK(t.device() == first->device(),
               "{}: its tensors are on different devices, {} (shape {}) and {} (shape {}); an op runs on one "
               "device: move one with .to(Device::parse(\"{}\"))",
               op, first->device().str(), shape_str(first->shape()), t.device().str(), shape_str(t.shape()),
               first->device().str());
    }
  }
  const Device device = first != nullptr ? first->device() : Device::cpu();
  return Kernels{kernels::backend_for(device), Stream::current(device)};
}

// ---- shapes -----------------------------------------------------------------------------------
DimSplit split_at_dim(const Shape& shape, std::int64_t dim) {
  DimSplit s;
  const auto ndim = static_cast<std::int64_t>(shape.size());
  s.dim = normalize_dim(dim, ndim);
  for (std::int64_t d = 0; d < s.dim; ++d) s.outer *= shape[d];
  s.extent = shape[s.dim];
  for (std::int64_t d = s.dim + 1; d < ndim; ++d) s.inner *= shape[d];
  return s;
}

Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim) {
  Shape out = shape;
  if (keepdim) {
    out[dim] = 1;
  } else {
    out.erase(out.begin() + dim);
  }
  return out;
}

Shape right_aligned(const Shape& shape, std::size_t ndim) {
  Shape out(ndim - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

std::int64_t rows_of(const Shape& shape) {
  if (shape.empty()) return 1;
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

// ---- raw data movement ------------------------------------------------------------------------
namespace {

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t step = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

// The permute/broadcast gather on x's device (kernels/backend.h).
Tensor gather(const Tensor& x, const Shape& out_shape, const std::vector<std::int64_t>& src_stride) {
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  const Kernels k = kernels_for("gather", {x});
  k->gather(k.stream, dtype_size(x.dtype()), x.raw_data(), out_shape, src_stride, out.raw_data());
  return out;
}

}  // namespace

std::vector<std::int64_t> checked_permutation(std::string_view op, const std::vector<std::int64_t>& dims,
                                              const Shape& shape) {
  const std::size_t nd = shape.size();
  WF_CHECK(dims.size() == nd, "{}: {} dims {} given for a tensor of shape {}; give one per dim", op, dims.size(), dims,
           shape_str(shape));
  std::vector<bool> seen(nd, false);
  std::vector<std::int64_t> resolved(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    resolved[d] = normalize_dim(dims[d], static_cast<std::int64_t>(nd));
    WF_CHECK(!seen[resolved[d]], "{}: dims {} for shape {} repeat dim {}; a permutation names each dim once", op, dims,
             shape_str(shape), resolved[d]);
    seen[resolved[d]] = true;
  }
  return resolved;
}

Tensor permute_copy(const Tensor& x, const std::vector<std::int64_t>& dims) {
  const std::vector<std::int64_t> resolved = checked_permutation("permute", dims, x.shape());
  const std::size_t nd = resolved.size();
  const auto in_stride = contiguous_strides(x.shape());
  Shape out_shape(nd);
  std::vector<std::int64_t> src_stride(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    out_shape[d] = x.shape()[resolved[d]];
    src_stride[d] = in_stride[resolved[d]];
  }
  return gather(x, out_shape, src_stride);
}

namespace {
// The permutation that moves `dim` to the end (to_last) or the last dim back to `dim`.
std::vector<std::int64_t> dim_to_last_order(std::int64_t ndim, std::int64_t dim, bool to_last) {
  std::vector<std::int64_t> order(ndim);
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (to_last) {
    order.erase(order.begin() + dim);
    order.push_back(dim);
  } else {
    order.pop_back();
    order.insert(order.begin() + dim, ndim - 1);
  }
  return order;
}
}  // namespace

Tensor move_dim_to_last(const Tensor& x, std::int64_t dim) {
  const std::int64_t d = normalize_dim(dim, x.dim());
  if (d == x.dim() - 1) return x;
  return permute_copy(x, dim_to_last_order(x.dim(), d, true));
}

Tensor move_last_to_dim(const Tensor& x, std::int64_t dim) {
  const std::int64_t d = normalize_dim(dim, x.dim());
  if (d == x.dim() - 1) return x;
  return permute_copy(x, dim_to_last_order(x.dim(), d, false));
}

Tensor broadcast_to(std::string_view op, const Tensor& x, const Shape& shape) {
  const std::size_t nd = shape.size();
  WF_CHECK(x.shape().size() <= nd, "{}: cannot broadcast shape {} to shape {} (more dims)", op, shape_str(x.shape()),
           shape_str(shape));
  const Shape aligned = right_aligned(x.shape(), nd);
  auto stride = contiguous_strides(aligned);
  for (std::size_t d = 0; d < nd; ++d) {
    WF_CHECK(aligned[d] == shape[d] || aligned[d] == 1, "{}: cannot broadcast shape {} to shape {}", op,
             shape_str(x.shape()), shape_str(shape));
    if (aligned[d] != shape[d]) stride[d] = 0;
  }
  return gather(x, shape, stride);
}

namespace {
// For each of `outer` blocks, copies `count` contiguous elements from src block o (at element
// src_start) to dst block o (at element dst_start). Blocks are src_block / dst_block elements long.
void copy_blocks(std::string_view op, const Tensor& src, std::int64_t src_block, std::int64_t src_start, Tensor& dst,
                 std::int64_t dst_block, std::int64_t dst_start, std::int64_t outer, std::int64_t count) {
  const Kernels k = kernels_for(op, {src, dst});
  k->copy_blocks(k.stream, dtype_size(src.dtype()), src.raw_data(), src_block, src_start, dst.raw_data(), dst_block,
                 dst_start, outer, count);
}
}  // namespace

Tensor narrow_copy(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  const DimSplit s = split_at_dim(x.shape(), dim);
  WF_CHECK(start >= 0 && length >= 0 && start + length <= s.extent,
           "narrow: range [{}, {}) is out of bounds for dim {} (extent {}) of shape {}", start, start + length, s.dim,
           s.extent, shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[s.dim] = length;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  copy_blocks("narrow", x, s.extent * s.inner, start * s.inner, out, length * s.inner, 0, s.outer, length * s.inner);
  return out;
}

void copy_into_range(Tensor& dst, std::int64_t dim, std::int64_t start, const Tensor& src) {
  const DimSplit d = split_at_dim(dst.shape(), dim);
  WF_CHECK(src.dtype() == dst.dtype(), "copy_into_range: source dtype {} differs from destination dtype {}",
           dtype_name(src.dtype()), dtype_name(dst.dtype()));
  WF_CHECK(src.dim() == dst.dim(), "copy_into_range: source shape {} and destination shape {} differ in rank",
           shape_str(src.shape()), shape_str(dst.shape()));
  const std::int64_t length = src.shape()[d.dim];
  Shape expected = dst.shape();
  expected[d.dim] = length;
  WF_CHECK(src.shape() == expected && start >= 0 && start + length <= d.extent,
           "copy_into_range: source shape {} does not fit destination shape {} at [{}, {}) of dim {}",
           shape_str(src.shape()), shape_str(dst.shape()), start, start + length, d.dim);
  copy_blocks("copy_into_range", src, length * d.inner, 0, dst, d.extent * d.inner, start * d.inner, d.outer, length * d.inner);
}

}  // namespace wf::ops
