// The CUDA entries of the reductions, step totals and norms of the step (kernels/cuda/cuda_kernels.h):
// argument checks as the CPU entries make them, then the launchers of kernels/cuda/reduce.cu.
#include <optional>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/data_error.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/reduce.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {
namespace {

void check_dims(const char* who, std::int64_t outer, std::int64_t dim, std::int64_t inner) {
  WF_CHECK(outer >= 0 && dim >= 0 && inner >= 0, "{}: outer, dim and inner must be non-negative, got [{}, {}, {}]",
           who, outer, dim, inner);
}

// The layout of a sum over the dims flagged in `summed` of a contiguous array of `extent`: extent-1
// dims dropped, neighbours both kept or both summed merged, the trailing kept run made `inner`.
SumLayout plan_sum(const char* who, const std::vector<std::int64_t>& extent, const std::vector<bool>& summed) {
  std::vector<std::int64_t> merged;
  std::vector<bool> merged_summed;
  for (std::size_t d = 0; d < extent.size(); ++d) {
    if (extent[d] == 1) continue;
    if (!merged.empty() && merged_summed.back() == summed[d]) {
      merged.back() *= extent[d];
    } else {
      merged.push_back(extent[d]);
      merged_summed.push_back(summed[d]);
    }
  }
  SumLayout layout;
  if (!merged.empty() && !merged_summed.back()) {
    layout.inner = merged.back();
    merged.pop_back();
    merged_summed.pop_back();
  }
  std::int64_t stride = layout.inner;
  std::vector<std::int64_t> strides(merged.size());
  for (std::size_t d = merged.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= merged[d];
  }
  for (std::size_t d = 0; d < merged.size(); ++d) {
    int& dims = merged_summed[d] ? layout.summed_dims : layout.kept_dims;
    WF_CHECK(dims < kMaxSumDims, "{}: the shape alternates kept and summed dims more than {} times; the CUDA sum "
             "takes at most {} runs of each (reshape the tensor to merge them)", who, 2 * kMaxSumDims, kMaxSumDims);
    if (merged_summed[d]) {
      layout.summed_extent[dims] = merged[d];
      layout.summed_stride[dims] = strides[d];
      layout.summed *= merged[d];
    } else {
      layout.kept_extent[dims] = merged[d];
      layout.kept_stride[dims] = strides[d];
      layout.kept *= merged[d];
    }
    ++dims;
  }
  return layout;
}

// out = scale · the sums of `layout` on `stream`, with the partials' scratch it needs.
void run_sum(const Stream& stream, DType dtype, const char* who, const SumLayout& layout, double scale,
             const void* x, void* out) {
  const std::int64_t chunks = sum_chunks(layout);
  const std::int64_t partials = sum_partials_size(layout, chunks);
  std::optional<detail::CudaScratch> scratch;  // none for one chunk: the sums go straight to out
  if (partials > 0) scratch.emplace(stream, static_cast<std::size_t>(partials) * sizeof(double));
  dispatch_floating(dtype, who, [&](auto t) {
    using T = decltype(t);
    launch_sum(native(stream), layout, chunks, scale, static_cast<const T*>(x), static_cast<T*>(out),
               scratch ? scratch->as<double>() : nullptr);
  });
}

void run_sum_dim(const Stream& stream, DType dtype, const char* who, std::int64_t outer, std::int64_t dim,
                 std::int64_t inner, double scale, const void* x, void* out) {
  check_dims(who, outer, dim, inner);
  run_sum(stream, dtype, who, plan_sum(who, {outer, dim, inner}, {false, true, false}), scale, x, out);
}

}  // namespace

void CudaKernels::sum_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                          const void* x, void* out) {
  run_sum_dim(stream, dtype, "sum_dim", outer, dim, inner, 1.0, x, out);
}

void CudaKernels::mean_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                           std::int64_t inner, const void* x, void* out) {
  // dim == 0: a sum of 0 times 1/0 = inf is NaN, the mean of nothing (as on the CPU).
  run_sum_dim(stream, dtype, "mean_dim", outer, dim, inner, 1.0 / double(dim), x, out);
}

void CudaKernels::max_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                          std::int64_t inner, const void* x, void* values, std::int64_t* argmax) {
  check_dims("max_dim", outer, dim, inner);
  if (outer == 0 || inner == 0) return;
  WF_CHECK(dim > 0, "max_dim: cannot take the max over an empty dim ([{}, {}, {}]); the maximum of nothing is "
           "undefined", outer, dim, inner);
  dispatch_floating(dtype, "max_dim", [&](auto t) {
    using T = decltype(t);
    launch_max_dim(native(stream), outer, dim, inner, static_cast<const T*>(x), static_cast<T*>(values), argmax);
  });
}

void CudaKernels::max_dim_backward(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                                   std::int64_t inner, const void* grad, const std::int64_t* argmax, void* dx) {
  check_dims("max_dim_backward", outer, dim, inner);
  dispatch_floating(dtype, "max_dim_backward", [&](auto t) {
    using T = decltype(t);
    launch_max_dim_backward(native(stream), outer, dim, inner, static_cast<const T*>(grad), argmax,
                            static_cast<T*>(dx));
  });
}

void CudaKernels::reduce_broadcast(const Stream& stream, DType dtype, const void* grad,
                                   const std::vector<std::int64_t>& out_shape, void* result,
                                   const std::vector<std::int64_t>& in_shape) {
  WF_CHECK(out_shape.size() == in_shape.size(), "reduce_broadcast: shapes {} and {} must have the same rank (pad "
           "the input shape with leading 1s)", out_shape, in_shape);
  std::vector<bool> summed(out_shape.size());
  for (std::size_t d = 0; d < out_shape.size(); ++d) {
    WF_CHECK(out_shape[d] >= 0 && (in_shape[d] == out_shape[d] || in_shape[d] == 1),
             "reduce_broadcast: cannot sum a gradient of shape {} down to shape {} (dim {}: the input extent must "
             "be 1 or equal the output's)", out_shape, in_shape, d);
    summed[d] = in_shape[d] == 1 && out_shape[d] != 1;
  }
  run_sum(stream, dtype, "reduce_broadcast", plan_sum("reduce_broadcast", out_shape, summed), 1.0, grad, result);
}

void CudaKernels::sum_of_products(const Stream& stream, DType dtype, std::int64_t n, const void* x, const void* y,
                                  double* out) {
  WF_CHECK(n >= 0, "sum_of_products: element count must be non-negative, got {}", n);
  detail::CudaScratch partials(stream, static_cast<std::size_t>(sum_of_products_blocks(n)) * sizeof(double));
  dispatch_floating(dtype, "sum_of_products", [&](auto t) {
    using T = decltype(t);
    launch_sum_of_products(native(stream), n, static_cast<const T*>(x), static_cast<const T*>(y),
                           partials.as<double>(), out);
  });
}

void CudaKernels::count_not_equal(const Stream& stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                                  std::int64_t* out) {
  WF_CHECK(n >= 0, "count_not_equal: element count must be non-negative, got {}", n);
  launch_count_not_equal(native(stream), n, x, value, out);
}

void CudaKernels::loss_normaliser(const Stream& stream, const double* totals, double* out) {
  launch_loss_normaliser(native(stream), totals, out);
}

void CudaKernels::count_targets(const Stream& stream, const char* what, std::int64_t rows, std::int64_t vocab,
                                const std::int64_t* targets, std::int64_t ignore_index, std::int64_t* count) {
  WF_CHECK(rows >= 0 && vocab >= 0, "{}: sizes must be non-negative, got rows={} vocab={}", what, rows, vocab);
  const DataError error = bad_target_error(stream, what, vocab, ignore_index);
  launch_count_targets(native(stream), rows, vocab, targets, ignore_index, count, error.record, error.message);
}

void CudaKernels::clip_coefficient(const Stream& stream, std::int64_t parts, const double* sq_sums, double max_norm,
                                   double* norm, double* coefficient) {
  WF_CHECK(parts >= 0, "clip_coefficient_of_squares: the count of partial sums must be non-negative, got {}", parts);
  WF_CHECK(max_norm >= 0.0, "clip_coefficient: max_norm must be >= 0, got {}", max_norm);
  launch_clip_coefficient(native(stream), parts, sq_sums, max_norm, norm, coefficient);
}

void CudaKernels::replica_spread(const Stream& stream, std::int64_t n, const std::vector<std::int64_t>& ends,
                                 const double* extremes, const double* own, double* out) {
  WF_CHECK(ends.empty() || ends.back() == n, "replica_spread: the parameters end at {}, but there are {} values",
           ends.empty() ? 0 : ends.back(), n);
  std::int64_t at = 0;
  for (std::int64_t end : ends) {
    WF_CHECK(end >= at, "replica_spread: parameter ends must not decrease, got {} after {}", end, at);
    at = end;
  }
  if (ends.empty()) return;
  const detail::CudaScratch device_ends(stream, ends.data(), ends.size() * sizeof(std::int64_t));
  launch_replica_spread(native(stream), n, static_cast<std::int64_t>(ends.size()), device_ends.as<std::int64_t>(),
                        extremes, own, out);
}

void CudaKernels::sum_of_squares_multi(const Stream& stream, DType dtype, const std::vector<TensorSpan>& tensors,
                                       double* out, double* total) {
  check_tensor_spans(tensors, "sum_of_squares_multi");
  std::vector<SquaresMultiEntry> table;
  table.reserve(tensors.size());
  for (const TensorSpan& t : tensors) table.push_back({t.data, t.n, {}});
  const std::int64_t blocks =
      lay_out_blocks(table, [](const SquaresMultiEntry& entry) { return sum_of_products_blocks(entry.n); });
  WF_CHECK(blocks <= INT32_MAX, "sum_of_squares_multi: {} tensors need {} blocks, more than one launch takes; "
           "split the list", tensors.size(), blocks);
  dispatch_floating(dtype, "sum_of_squares_multi", [&](auto t) {
    using T = decltype(t);
    if (table.empty()) return;
    const detail::CudaScratch device_table(stream, table.data(), table.size() * sizeof(SquaresMultiEntry));
    const detail::CudaScratch partials(stream, static_cast<std::size_t>(blocks) * sizeof(double));
    launch_sum_of_squares_multi<T>(native(stream), static_cast<std::int64_t>(table.size()),
                                   device_table.as<SquaresMultiEntry>(), blocks, partials.as<double>(), out, total);
  });
}

}  // namespace wf::kernels::cuda
