#pragma once
// Launchers of the reductions and step totals (kernels/cuda/reduce.cu), for kernels/cuda/reduce.cpp.
// Semantics are kernels/cpu/reduce.h, step_totals.h, optimizer.h (clip_coefficient_of_squares) and
// replica_spread.h. Every sum accumulates in double, as the CPU's do, over a reduction tree fixed by
// the shape alone: the same inputs give the same bits on every run. No float atomics.
//
// fmt-free: nvcc compiles this header too.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/multi_tensor.h"
#include "src/core/cuda/device_error.h"

namespace wf::kernels::cuda {

// ---- sums over some dims of a contiguous row-major array ---------------------------------------
// out[k, i] = scale · Σ_s x[kept_offset(k) + summed_offset(s) + i]: k walks the kept dims before the
// trailing kept run `inner` (row-major), s the summed dims (row-major). Built on the host by
// kernels/cuda/reduce.cpp after dropping extent-1 dims and merging neighbours alike.
constexpr int kMaxSumDims = 8;
struct SumLayout {
  int kept_dims = 0, summed_dims = 0;
  std::int64_t kept_extent[kMaxSumDims] = {}, kept_stride[kMaxSumDims] = {};
  std::int64_t summed_extent[kMaxSumDims] = {}, summed_stride[kMaxSumDims] = {};
  std::int64_t kept = 1;    // Π kept_extent
  std::int64_t summed = 1;  // Π summed_extent
  std::int64_t inner = 1;
};

// The pieces the summed range is cut into (a function of the layout only): 1 sums straight into
// `out`; more need sum_partials_size(layout, chunks) doubles of scratch for the launch.
std::int64_t sum_chunks(const SumLayout& layout);
inline std::int64_t sum_partials_size(const SumLayout& layout, std::int64_t chunks) {
  return chunks > 1 ? chunks * layout.kept * layout.inner : 0;
}
// out [kept·inner] = scale · the sums (static_cast<T>(double sum · scale), as the CPU rounds).
void launch_sum(cudaStream_t stream, const SumLayout& layout, std::int64_t chunks, double scale, const float* x,
                float* out, double* partials);
void launch_sum(cudaStream_t stream, const SumLayout& layout, std::int64_t chunks, double scale, const double* x,
                double* out, double* partials);

// ---- max over one dim of [outer, dim, inner] (dim >= 1) ----------------------------------------
// values [outer, inner], argmax nullable: the first maximum, or the first NaN (kernels/cpu/reduce.h).
void launch_max_dim(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const float* x,
                    float* values, std::int64_t* argmax);
void launch_max_dim(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const double* x,
                    double* values, std::int64_t* argmax);
// dx [outer, dim, inner] = grad at argmax, 0 elsewhere (every element of dx written).
void launch_max_dim_backward(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                             const float* grad, const std::int64_t* argmax, float* dx);
void launch_max_dim_backward(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                             const double* grad, const std::int64_t* argmax, double* dx);

// ---- Σ x·y in double ---------------------------------------------------------------------------
// Block partials first (their count a function of n only: total_blocks doubles of scratch), then
// one warp adds them in a fixed order into *out.
int sum_of_products_blocks(std::int64_t n);
void launch_sum_of_products(cudaStream_t stream, std::int64_t n, const float* x, const float* y, double* partials,
                            double* out);
void launch_sum_of_products(cudaStream_t stream, std::int64_t n, const double* x, const double* y,
                            double* partials, double* out);

// ---- step totals (one block each: the targets of a step are at most a few hundred thousand) -----
void launch_count_not_equal(cudaStream_t stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                            std::int64_t* out);
void launch_loss_normaliser(cudaStream_t stream, const double* totals, double* out);
// *count = the targets that are not ignore_index and lie in [0, vocab); the first other one (lowest
// row, as the CPU finds it) is reported with `message` (row, value) to `record`.
void launch_count_targets(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const std::int64_t* targets,
                          std::int64_t ignore_index, std::int64_t* count, detail::DeviceErrorRecord* record,
                          int message);
// *norm = sqrt(Σ sq_sums, added in index order) and *coefficient = clip_coefficient(*norm, max_norm).
void launch_clip_coefficient(cudaStream_t stream, std::int64_t parts, const double* sq_sums, double max_norm,
                             double* norm, double* coefficient);
// Per parameter p (elements [ends[p − 1], ends[p]), ends on the device): out[2p] = max(0, max over
// its elements of extremes[k] + extremes[n + k]), out[2p + 1] = max(0, max |own[k]|), NaN passed over.
void launch_replica_spread(cudaStream_t stream, std::int64_t n, std::int64_t parameters, const std::int64_t* ends,
                           const double* extremes, const double* own, double* out);

// ---- Σ x² of many tensors in one launch (sum_of_squares_multi) ---------------------------------
// One tensor of the list as the kernels read it from the table the host uploads (device memory of
// the launch's T): sum_of_products_blocks(n) blocks, and as many partials from blocks.first on.
struct SquaresMultiEntry {
  const void* x;
  std::int64_t n;
  MultiTensorBlocks blocks;
};
// out[t] = Σ x_t² for every tensor of `table` (device memory, `tensors` entries laid out by
// lay_out_blocks over `blocks` blocks and partials), each tensor's block partials and their sum
// exactly launch_sum_of_products(n, x, x)'s: the same bits. Then, total non-null, *total += out[0]
// + out[1] + ... in that order. Three launches for the whole list.
template <class T>
void launch_sum_of_squares_multi(cudaStream_t stream, std::int64_t tensors, const SquaresMultiEntry* table,
                                 std::int64_t blocks, double* partials, double* out, double* total);

}  // namespace wf::kernels::cuda
