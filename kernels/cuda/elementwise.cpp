// The CUDA backend's elementwise entries (kernels/cuda/elementwise.cu holds the kernels): the
// argument checks the CPU kernels make, the element type, and the launch on the stream.
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/strided.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {
namespace {

void check_count(const char* what, std::int64_t n) {
  WF_CHECK(n >= 0, "{} (cuda): element count must be non-negative, got {}", what, n);
}
void check_rows_cols(const char* what, std::int64_t rows, std::int64_t cols) {
  WF_CHECK(rows >= 0 && cols >= 0, "{} (cuda): rows and cols must be non-negative, got [{}, {}]", what, rows, cols);
}

// The broadcast's index map: a's and b's strides over out_shape (0 along a broadcast dim), merged.
StridedLayout<2> broadcast_layout(const std::vector<std::int64_t>& a_shape, const std::vector<std::int64_t>& b_shape,
                                  const std::vector<std::int64_t>& out_shape) {
  const std::size_t nd = out_shape.size();
  WF_CHECK(a_shape.size() == nd && b_shape.size() == nd,
           "binary_broadcast (cuda): shapes {} and {} are not right-aligned to the output's rank {} ({})", a_shape,
           b_shape, nd, out_shape);
  std::vector<std::int64_t> strides[2] = {std::vector<std::int64_t>(nd), std::vector<std::int64_t>(nd)};
  const std::vector<std::int64_t>* shapes[2] = {&a_shape, &b_shape};
  for (int k = 0; k < 2; ++k) {
    std::int64_t step = 1;
    for (std::size_t d = nd; d-- > 0;) {
      const std::int64_t extent = (*shapes[k])[d];
      WF_CHECK(out_shape[d] >= 0 && (extent == out_shape[d] || extent == 1),
               "binary_broadcast (cuda): shapes {} and {} do not broadcast to {} (dim {}: each input extent must be "
               "1 or equal the output's)",
               a_shape, b_shape, out_shape, d);
      strides[k][d] = extent == 1 ? 0 : step;
      step *= extent;
    }
  }
  StridedLayout<2> layout;
  for (const std::int64_t e : out_shape) {
    if (e == 0) return layout;  // an empty output launches nothing, whatever its rank (as on the CPU)
  }
  const int merged = merge_strided_dims(out_shape, strides, layout);
  WF_CHECK(merged <= kMaxStridedDims,
           "binary_broadcast (cuda): shapes {} and {} broadcast to {} in {} independent dims; the kernel walks at "
           "most {} (merge or reshape the operands first)",
           a_shape, b_shape, out_shape, merged, kMaxStridedDims);
  return layout;
}

}  // namespace

void CudaKernels::binary_broadcast(const Stream& stream, DType dtype, BinaryOp op, const void* a,
                                   const std::vector<std::int64_t>& a_shape, const void* b,
                                   const std::vector<std::int64_t>& b_shape, void* out,
                                   const std::vector<std::int64_t>& out_shape) {
  const StridedLayout<2> layout = broadcast_layout(a_shape, b_shape, out_shape);
  std::int64_t n = 1;
  for (const std::int64_t e : out_shape) n *= e;
  dispatch_floating(dtype, "binary_broadcast", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_binary_broadcast<T>(native(stream), op, n, layout, static_cast<const T*>(a), static_cast<const T*>(b),
                               static_cast<T*>(out));
  });
}

void CudaKernels::affine(const Stream& stream, DType dtype, std::int64_t n, double alpha, double shift, const void* x,
                         void* out) {
  check_count("affine", n);
  dispatch_floating(dtype, "affine", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_affine<T>(native(stream), n, static_cast<T>(alpha), static_cast<T>(shift), static_cast<const T*>(x),
                     static_cast<T*>(out));
  });
}

void CudaKernels::add_scaled(const Stream& stream, DType dtype, std::int64_t n, double alpha, const void* x,
                             void* y) {
  check_count("add_scaled", n);
  dispatch_floating(dtype, "add_scaled", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_add_scaled<T>(native(stream), n, static_cast<T>(alpha), static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void CudaKernels::add_bias(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols, const void* x,
                           const void* bias, void* out) {
  check_rows_cols("add_bias", rows, cols);
  WF_CHECK(bias != nullptr, "add_bias (cuda): the bias is missing");
  dispatch_floating(dtype, "add_bias", [&](auto t) {
    using T = decltype(t);
    if (rows * cols == 0) return;
    launch_bias_residual_add<T>(native(stream), rows, cols, static_cast<const T*>(x), static_cast<const T*>(bias),
                                nullptr, static_cast<T*>(out));
  });
}

void CudaKernels::bias_residual_add(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                    const void* x, const void* bias, const void* residual, void* out) {
  check_rows_cols("bias_residual_add", rows, cols);
  WF_CHECK(residual != nullptr, "bias_residual_add (cuda): the residual is missing");
  dispatch_floating(dtype, "bias_residual_add", [&](auto t) {
    using T = decltype(t);
    if (rows * cols == 0) return;
    launch_bias_residual_add<T>(native(stream), rows, cols, static_cast<const T*>(x), static_cast<const T*>(bias),
                                static_cast<const T*>(residual), static_cast<T*>(out));
  });
}

void CudaKernels::unary_forward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* x,
                                void* y) {
  check_count(unary_op_name(op), n);
  dispatch_floating(dtype, unary_op_name(op), [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_unary_forward<T>(native(stream), op, n, static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void CudaKernels::unary_backward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* saved,
                                 const void* dy, void* dx) {
  WF_CHECK(op == UnaryOp::gelu || op == UnaryOp::silu || op == UnaryOp::tanh,
           "unary_backward: {}'s backward is an ordinary product or quotient; there is no kernel for it",
           unary_op_name(op));
  check_count(unary_op_name(op), n);
  dispatch_floating(dtype, unary_op_name(op), [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_unary_backward<T>(native(stream), op, n, static_cast<const T*>(saved), static_cast<const T*>(dy),
                             static_cast<T*>(dx));
  });
}

void CudaKernels::dropout_mask(const Stream& stream, DType dtype, std::int64_t n, double p, std::uint64_t seed,
                               std::uint64_t first, const DropoutLayout& layout, const void* x, void* out) {
  check_count("dropout_mask", n);
  WF_CHECK(layout.block >= 1, "dropout_mask (cuda): the layout's block must be at least 1 element, got {}",
           layout.block);
  dispatch_floating(dtype, "dropout", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));  // the CPU's, rounded on the host alike
    launch_dropout_mask<T>(native(stream), n, p, keep_scale, seed, first, layout.block, layout.stride, layout.start,
                           static_cast<const T*>(x), static_cast<T*>(out));
  });
}

void CudaKernels::clamp(const Stream& stream, DType dtype, std::int64_t n, double lo, double hi, const void* x,
                        void* y) {
  check_count("clamp", n);
  dispatch_floating(dtype, "clamp", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_clamp<T>(native(stream), n, static_cast<T>(lo), static_cast<T>(hi), static_cast<const T*>(x),
                    static_cast<T*>(y));
  });
}

void CudaKernels::scale_inplace(const Stream& stream, DType dtype, std::int64_t n, void* x, double alpha) {
  check_count("scale_inplace", n);
  dispatch_floating(dtype, "scale_inplace", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_scale<T>(native(stream), n, static_cast<T*>(x), static_cast<T>(alpha));
  });
}

void CudaKernels::scale_inplace_by(const Stream& stream, DType dtype, std::int64_t n, void* x, const double* factor) {
  check_count("scale_inplace_by", n);
  dispatch_floating(dtype, "scale_inplace_by", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_scale_by_device_factor<T>(native(stream), n, static_cast<T*>(x), factor, false);
  });
}

void CudaKernels::scale_by_coefficient(const Stream& stream, DType dtype, std::int64_t n, void* x,
                                       const double* coefficient) {
  check_count("scale_by_coefficient", n);
  dispatch_floating(dtype, "scale_by_coefficient", [&](auto t) {
    using T = decltype(t);
    if (n == 0) return;
    launch_scale_by_device_factor<T>(native(stream), n, static_cast<T*>(x), coefficient, true);
  });
}

}  // namespace wf::kernels::cuda
