// Kernels of the reductions and step totals (kernels/cuda/reduce.h). Sums accumulate in double, as
// the CPU's do; every reduction tree (which thread adds what, which block partial goes where) is a
// function of the shape alone, so a run repeated gives the same bits. No float atomics.
#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr std::int64_t kNoIndex = INT64_MAX;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Offset of the idx-th element (idx < Π extent) of a row-major index space with the given extents
// and strides. One dim, the common case (sum_dim), needs no division.
__device__ __forceinline__ std::int64_t offset_of(std::int64_t idx, int dims, const std::int64_t* extent,
                                                  const std::int64_t* stride) {
  if (dims == 1) return idx * stride[0];
  std::int64_t off = 0;
  for (int d = dims - 1; d >= 0; --d) {
    off += (idx % extent[d]) * stride[d];
    idx /= extent[d];
  }
  return off;
}

// The warp a thread belongs to, counted over the grid, and the warps in the grid.
__device__ __forceinline__ std::int64_t grid_warp() {
  return (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
}
__device__ __forceinline__ std::int64_t grid_warps() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarpSize;
}

// ---- sums over some dims ------------------------------------------------------------------------

// The summed range [begin, end) of chunk c when `summed` elements are cut into `chunks` pieces.
struct ChunkRange {
  std::int64_t begin, end;
};
__device__ __forceinline__ ChunkRange chunk_range(std::int64_t c, std::int64_t chunks, std::int64_t summed) {
  const std::int64_t len = (summed + chunks - 1) / chunks;
  const std::int64_t begin = c * len;
  return {begin, begin + len < summed ? begin + len : summed};
}

// inner == 1: the summed elements of an output are (mostly) contiguous, so a warp reads them
// together; one warp per (chunk, output), lane j adding elements j, j + 32, ... then a warp tree.
// Output o of chunk c goes to partials[c·kept + o], or straight to out when there is one chunk.
template <class T>
__global__ void sum_rows_kernel(SumLayout L, std::int64_t chunks, double scale, const T* x, T* out,
                                double* partials) {
  const int lane = threadIdx.x % kWarpSize;
  const std::int64_t units = L.kept * chunks;
  for (std::int64_t u = grid_warp(); u < units; u += grid_warps()) {  // uniform over the warp
    const std::int64_t c = u / L.kept, k = u % L.kept;
    const T* base = x + offset_of(k, L.kept_dims, L.kept_extent, L.kept_stride);
    const ChunkRange range = chunk_range(c, chunks, L.summed);
    double acc = 0.0;
    for (std::int64_t s = range.begin + lane; s < range.end; s += kWarpSize) {
      acc += static_cast<double>(base[offset_of(s, L.summed_dims, L.summed_extent, L.summed_stride)]);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
      if (chunks > 1) {
        partials[u] = acc;
      } else {
        out[k] = static_cast<T>(acc * scale);
      }
    }
  }
}

// inner > 1: neighbouring threads take neighbouring columns i, each adding its chunk of the summed
// elements in order. Unit u = (c·kept + k)·inner + i; its partial is partials[u].
template <class T>
__global__ void sum_columns_kernel(SumLayout L, std::int64_t chunks, double scale, const T* x, T* out,
                                   double* partials) {
  const std::int64_t outputs = L.kept * L.inner;
  WF_GRID_STRIDE_LOOP(u, chunks * outputs) {
    const std::int64_t c = u / outputs, o = u % outputs;
    const std::int64_t k = o / L.inner, i = o % L.inner;
    const T* base = x + offset_of(k, L.kept_dims, L.kept_extent, L.kept_stride) + i;
    const ChunkRange range = chunk_range(c, chunks, L.summed);
    double acc = 0.0;
    for (std::int64_t s = range.begin; s < range.end; ++s) {
      acc += static_cast<double>(base[offset_of(s, L.summed_dims, L.summed_extent, L.summed_stride)]);
    }
    if (chunks > 1) {
      partials[u] = acc;
    } else {
      out[o] = static_cast<T>(acc * scale);
    }
  }
}

// out[o] = (Σ_c partials[c·outputs + o], in chunk order) · scale.
template <class T>
__global__ void sum_finish_kernel(std::int64_t outputs, std::int64_t chunks, double scale, const double* partials,
                                  T* out) {
  WF_GRID_STRIDE_LOOP(o, outputs) {
    double total = 0.0;
    for (std::int64_t c = 0; c < chunks; ++c) total += partials[c * outputs + o];
    out[o] = static_cast<T>(total * scale);
  }
}

template <class T>
void sum(cudaStream_t stream, const SumLayout& L, std::int64_t chunks, double scale, const T* x, T* out,
         double* partials) {
  const std::int64_t outputs = L.kept * L.inner;
  if (outputs == 0) return;
  if (L.inner == 1) {
    sum_rows_kernel<T><<<blocks_for(L.kept * chunks * kWarpSize), kThreads, 0, stream>>>(L, chunks, scale, x, out,
                                                                                         partials);
    WF_CUDA_CHECK_LAUNCH("sum_rows_kernel");
  } else {
    sum_columns_kernel<T><<<blocks_for(chunks * outputs), kThreads, 0, stream>>>(L, chunks, scale, x, out,
                                                                               partials);
    WF_CUDA_CHECK_LAUNCH("sum_columns_kernel");
  }
  if (chunks > 1) {
    sum_finish_kernel<T><<<blocks_for(outputs), kThreads, 0, stream>>>(outputs, chunks, scale, partials, out);
    WF_CUDA_CHECK_LAUNCH("sum_finish_kernel");
  }
}

// ---- max over one dim ---------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;
}
// a takes b's place as the maximum: larger, or a NaN (which propagates) replacing a number
// (kernels/cpu/reduce.cpp's beats).
template <class T>
__device__ __forceinline__ bool beats(T a, T b) {
  return a > b || (is_nan(a) && !is_nan(b));
}

// inner > 1: one thread per output walks d in order, exactly as the CPU does.
template <class T>
__global__ void max_columns_kernel(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* values,
                                   std::int64_t* argmax) {
  WF_GRID_STRIDE_LOOP(u, outer * inner) {
    const std::int64_t o = u / inner, i = u % inner;
    const T* base = x + o * dim * inner + i;
    T best = base[0];
    std::int64_t arg = 0;
    for (std::int64_t d = 1; d < dim; ++d) {
      const T v = base[d * inner];
      if (beats(v, best)) {
        best = v;
        arg = d;
      }
    }
    values[u] = best;
    if (argmax != nullptr) argmax[u] = arg;
  }
}

// inner == 1: one warp per row. Each lane keeps the first best of its elements (lane, lane + 32,
// ...); lanes then combine pairwise, the better value winning and the lower index breaking ties
// (equal values, or two NaNs): the first maximum, or the first NaN, of the row, as the CPU finds.
// Lanes with no element hold index kNoIndex, which loses every comparison.
template <class T>
__global__ void max_rows_kernel(std::int64_t outer, std::int64_t dim, const T* x, T* values, std::int64_t* argmax) {
  const int lane = threadIdx.x % kWarpSize;
  for (std::int64_t o = grid_warp(); o < outer; o += grid_warps()) {  // uniform over the warp
    const T* row = x + o * dim;
    T best = T(0);
    std::int64_t arg = kNoIndex;
    for (std::int64_t d = lane; d < dim; d += kWarpSize) {
      const T v = row[d];
      if (arg == kNoIndex || beats(v, best)) {
        best = v;
        arg = d;
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const T other = __shfl_xor_sync(0xffffffffu, best, offset);
      const std::int64_t other_arg = __shfl_xor_sync(0xffffffffu, arg, offset);
      const bool take = other_arg != kNoIndex &&
                        (arg == kNoIndex || beats(other, best) || (!beats(best, other) && other_arg < arg));
      if (take) {
        best = other;
        arg = other_arg;
      }
    }
    if (lane == 0) {
      values[o] = best;
      if (argmax != nullptr) argmax[o] = arg;
    }
  }
}

template <class T>
void max_dim(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* x, T* values,
             std::int64_t* argmax) {
  if (outer == 0 || inner == 0) return;
  if (inner == 1) {
    max_rows_kernel<T><<<blocks_for(outer * kWarpSize), kThreads, 0, stream>>>(outer, dim, x, values, argmax);
    WF_CUDA_CHECK_LAUNCH("max_rows_kernel");
  } else {
    max_columns_kernel<T><<<blocks_for(outer * inner), kThreads, 0, stream>>>(outer, dim, inner, x, values, argmax);
    WF_CUDA_CHECK_LAUNCH("max_columns_kernel");
  }
}

// Every element of dx: grad where d is the argmax of its column, else 0 (no scatter, no race).
template <class T>
__global__ void max_backward_kernel(std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* grad,
                                    const std::int64_t* argmax, T* dx) {
  WF_GRID_STRIDE_LOOP(e, outer * dim * inner) {
    const std::int64_t i = e % inner;
    const std::int64_t d = (e / inner) % dim;
    const std::int64_t o = e / (inner * dim);
    const std::int64_t k = o * inner + i;
    dx[e] = argmax[k] == d ? grad[k] : T(0);
  }
}

template <class T>
void max_dim_backward(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const T* grad,
                      const std::int64_t* argmax, T* dx) {
  const std::int64_t n = outer * dim * inner;
  if (n == 0) return;
  max_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(outer, dim, inner, grad, argmax, dx);
  WF_CUDA_CHECK_LAUNCH("max_backward_kernel");
}

// ---- Σ x·y --------------------------------------------------------------------------------------

constexpr int kDotMaxBlocks = 1024;
constexpr std::int64_t kDotPerThread = 16;  // elements per thread before another block is worth it

template <class T>
__global__ void dot_partials_kernel(std::int64_t n, const T* x, const T* y, double* partials) {
  __shared__ double scratch[32];
  double acc = 0.0;
  WF_GRID_STRIDE_LOOP(i, n) acc += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One warp: lane j adds partials j, j + 32, ... in order, then a warp tree.
__global__ void dot_finish_kernel(int blocks, const double* partials, double* out) {
  double acc = 0.0;
  for (int b = static_cast<int>(threadIdx.x); b < blocks; b += kWarpSize) acc += partials[b];
  acc = warp_sum(acc);
  if (threadIdx.x == 0) *out = acc;
}

template <class T>
void sum_of_products(cudaStream_t stream, std::int64_t n, const T* x, const T* y, double* partials, double* out) {
  const int blocks = sum_of_products_blocks(n);
  dot_partials_kernel<T><<<blocks, kThreads, 0, stream>>>(n, x, y, partials);
  WF_CUDA_CHECK_LAUNCH("dot_partials_kernel");
  dot_finish_kernel<<<1, kWarpSize, 0, stream>>>(blocks, partials, out);
  WF_CUDA_CHECK_LAUNCH("dot_finish_kernel");
}

// ---- step totals --------------------------------------------------------------------------------

constexpr int kCountThreads = 1024;

__device__ __forceinline__ std::int64_t warp_min(std::int64_t v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const std::int64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o < v ? o : v;
  }
  return v;
}
// The minimum of v over the block, to every thread (as launch.cuh's block_max).
__device__ std::int64_t block_min(std::int64_t v, std::int64_t* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  v = warp_min(v);
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : kNoIndex;
  return warp_min(v);
}

__global__ void count_not_equal_kernel(std::int64_t n, const std::int64_t* x, std::int64_t value,
                                       std::int64_t* out) {
  __shared__ std::int64_t scratch[32];
  std::int64_t count = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) count += x[i] != value ? 1 : 0;
  count = block_sum(count, scratch);
  if (threadIdx.x == 0) *out = count;
}

__global__ void loss_normaliser_kernel(const double* totals, double* out) {
  const double normaliser = totals[1] > 0 ? 1.0 / totals[1] : 0.0;
  out[0] = normaliser;
  out[1] = totals[0] * normaliser;
}

__global__ void count_targets_kernel(std::int64_t rows, std::int64_t vocab, const std::int64_t* targets,
                                     std::int64_t ignore_index, std::int64_t* count,
                                     detail::DeviceErrorRecord* record, int message) {
  __shared__ std::int64_t scratch[32];
  std::int64_t valid = 0, first_bad = kNoIndex;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t t = targets[r];
    if (t == ignore_index) continue;
    if (t >= 0 && t < vocab) {
      ++valid;
    } else if (r < first_bad) {
      first_bad = r;
    }
  }
  valid = block_sum(valid, scratch);
  first_bad = block_min(first_bad, scratch);
  if (threadIdx.x == 0) {
    *count = valid;
    if (first_bad != kNoIndex) detail::report_device_error(record, message, first_bad, targets[first_bad]);
  }
}

// The sum in index order, as kernels/cpu/optimizer.cpp adds it, and kernels/kernel_args.cpp's
// clip_coefficient: a NaN coefficient stays NaN, anything else is capped at 1 (std::min(1.0, c)).
__global__ void clip_coefficient_kernel(std::int64_t parts, const double* sq_sums, double max_norm, double* norm,
                                        double* coefficient) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < parts; ++i) sum += sq_sums[i];
  const double total_norm = sqrt(sum);
  *norm = total_norm;
  const double c = max_norm / (total_norm + 1e-6);
  *coefficient = is_nan(c) ? c : (c < 1.0 ? c : 1.0);
}

// One block per parameter. The running maxima start at +0 and take a value only when it is
// larger (NaN never is), so every partial is a number >= +0 and any tree of maxima gives the bits
// the CPU's loop of std::max gives.
__global__ void replica_spread_kernel(std::int64_t n, std::int64_t parameters, const std::int64_t* ends,
                                      const double* extremes, const double* own, double* out) {
  __shared__ double scratch[32];
  for (std::int64_t p = blockIdx.x; p < parameters; p += gridDim.x) {  // uniform over the block
    const std::int64_t begin = p == 0 ? 0 : ends[p - 1], end = ends[p];
    double spread = 0.0, scale = 0.0;
    for (std::int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
      const double s = extremes[k] + extremes[n + k];  // max − min over the ranks
      const double a = fabs(own[k]);
      spread = spread < s ? s : spread;
      scale = scale < a ? a : scale;
    }
    spread = block_max(spread, scratch, 0.0);
    scale = block_max(scale, scratch, 0.0);
    if (threadIdx.x == 0) {
      out[2 * p] = spread;
      out[2 * p + 1] = scale;
    }
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

// Enough independent pieces to fill a GPU, each long enough to be worth a partial: rows (inner 1)
// are counted in warps, columns in threads.
std::int64_t sum_chunks(const SumLayout& layout) {
  constexpr std::int64_t kRowTargetWarps = 4096, kRowMinChunk = 2048;
  constexpr std::int64_t kColumnTargetThreads = std::int64_t{1} << 17, kColumnMinChunk = 64;
  const std::int64_t outputs = layout.kept * layout.inner;
  if (outputs == 0 || layout.summed <= 1) return 1;
  const bool rows = layout.inner == 1;
  const std::int64_t wanted = ceil_div(rows ? kRowTargetWarps : kColumnTargetThreads, outputs);
  const std::int64_t most = ceil_div(layout.summed, rows ? kRowMinChunk : kColumnMinChunk);
  const std::int64_t chunks = wanted < most ? wanted : most;
  return chunks < 1 ? 1 : chunks;
}

void launch_sum(cudaStream_t stream, const SumLayout& layout, std::int64_t chunks, double scale, const float* x,
                float* out, double* partials) {
  sum(stream, layout, chunks, scale, x, out, partials);
}
void launch_sum(cudaStream_t stream, const SumLayout& layout, std::int64_t chunks, double scale, const double* x,
                double* out, double* partials) {
  sum(stream, layout, chunks, scale, x, out, partials);
}

void launch_max_dim(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const float* x,
                    float* values, std::int64_t* argmax) {
  max_dim(stream, outer, dim, inner, x, values, argmax);
}
void launch_max_dim(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner, const double* x,
                    double* values, std::int64_t* argmax) {
  max_dim(stream, outer, dim, inner, x, values, argmax);
}
void launch_max_dim_backward(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                             const float* grad, const std::int64_t* argmax, float* dx) {
  max_dim_backward(stream, outer, dim, inner, grad, argmax, dx);
}
void launch_max_dim_backward(cudaStream_t stream, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                             const double* grad, const std::int64_t* argmax, double* dx) {
  max_dim_backward(stream, outer, dim, inner, grad, argmax, dx);
}

int sum_of_products_blocks(std::int64_t n) {
  const std::int64_t blocks = ceil_div(n, kThreads * kDotPerThread);
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kDotMaxBlocks ? kDotMaxBlocks : blocks));
}
void launch_sum_of_products(cudaStream_t stream, std::int64_t n, const float* x, const float* y, double* partials,
                            double* out) {
  sum_of_products(stream, n, x, y, partials, out);
}
void launch_sum_of_products(cudaStream_t stream, std::int64_t n, const double* x, const double* y,
                            double* partials, double* out) {
  sum_of_products(stream, n, x, y, partials, out);
}

void launch_count_not_equal(cudaStream_t stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                            std::int64_t* out) {
  count_not_equal_kernel<<<1, kCountThreads, 0, stream>>>(n, x, value, out);
  WF_CUDA_CHECK_LAUNCH("count_not_equal_kernel");
}

void launch_loss_normaliser(cudaStream_t stream, const double* totals, double* out) {
  loss_normaliser_kernel<<<1, 1, 0, stream>>>(totals, out);
  WF_CUDA_CHECK_LAUNCH("loss_normaliser_kernel");
}

void launch_count_targets(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const std::int64_t* targets,
                          std::int64_t ignore_index, std::int64_t* count, detail::DeviceErrorRecord* record,
                          int message) {
  count_targets_kernel<<<1, kCountThreads, 0, stream>>>(rows, vocab, targets, ignore_index, count, record, message);
  WF_CUDA_CHECK_LAUNCH("count_targets_kernel");
}

void launch_clip_coefficient(cudaStream_t stream, std::int64_t parts, const double* sq_sums, double max_norm,
                             double* norm, double* coefficient) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(parts, sq_sums, max_norm, norm, coefficient);
  WF_CUDA_CHECK_LAUNCH("clip_coefficient_kernel");
}

void launch_replica_spread(cudaStream_t stream, std::int64_t n, std::int64_t parameters, const std::int64_t* ends,
                           const double* extremes, const double* own, double* out) {
  if (parameters == 0) return;
  const int blocks = static_cast<int>(parameters < kMaxBlocks ? parameters : kMaxBlocks);
  replica_spread_kernel<<<blocks, kThreads, 0, stream>>>(n, parameters, ends, extremes, own, out);
  WF_CUDA_CHECK_LAUNCH("replica_spread_kernel");
}

// ---- Σ x² of many tensors -----------------------------------------------------------------------
namespace {

// Block b of tensor t is dot_partials_kernel's block b of a launch over t alone (its elements
// b·blockDim + thread, then every sum_of_products_blocks(n)·blockDim-th; the same products, adds
// and tree), its partial at partials[first + b].
template <class T>
__global__ void squares_multi_partials_kernel(std::int64_t tensors, const SquaresMultiEntry* table,
                                              double* partials) {
  __shared__ double scratch[32];
  __shared__ std::int64_t tensor;
  if (threadIdx.x == 0) tensor = tensor_of_block(table, tensors, blockIdx.x);
  __syncthreads();
  const SquaresMultiEntry m = table[tensor];
  const T* x = static_cast<const T*>(m.x);
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) - m.blocks.first;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * m.blocks.count;
  double acc = 0.0;
  for (std::int64_t i = b * blockDim.x + threadIdx.x; i < m.n; i += stride) {
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One warp per tensor, as dot_finish_kernel: lane j adds its partials j, j + 32, ... in order, then a
// warp tree. The warp's tensor is uniform over it, so whole warps leave together.
__global__ void squares_multi_finish_kernel(std::int64_t tensors, const SquaresMultiEntry* table,
                                            const double* partials, double* out) {
  const std::int64_t t = grid_warp();
  if (t >= tensors) return;
  const int lane = threadIdx.x % kWarpSize;
  const SquaresMultiEntry m = table[t];
  double acc = 0.0;
  for (std::int64_t b = lane; b < m.blocks.count; b += kWarpSize) acc += partials[m.blocks.first + b];
  acc = warp_sum(acc);
  if (lane == 0) out[t] = acc;
}

// *total += out[0] + out[1] + ..., one add at a time in index order (as the CPU adds them).
__global__ void squares_multi_total_kernel(std::int64_t tensors, const double* out, double* total) {
  double sum = *total;
  for (std::int64_t t = 0; t < tensors; ++t) sum += out[t];
  *total = sum;
}

}  // namespace

template <class T>
void launch_sum_of_squares_multi(cudaStream_t stream, std::int64_t tensors, const SquaresMultiEntry* table,
                                 std::int64_t blocks, double* partials, double* out, double* total) {
  if (tensors == 0) return;
  squares_multi_partials_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(tensors, table, partials);
  WF_CUDA_CHECK_LAUNCH("squares_multi_partials_kernel");
  squares_multi_finish_kernel<<<blocks_for(tensors * kWarpSize), kThreads, 0, stream>>>(tensors, table, partials,
                                                                                         out);
  WF_CUDA_CHECK_LAUNCH("squares_multi_finish_kernel");
  if (total != nullptr) {
    squares_multi_total_kernel<<<1, 1, 0, stream>>>(tensors, out, total);
    WF_CUDA_CHECK_LAUNCH("squares_multi_total_kernel");
  }
}

template void launch_sum_of_squares_multi<float>(cudaStream_t, std::int64_t, const SquaresMultiEntry*, std::int64_t,
                                                 double*, double*, double*);
template void launch_sum_of_squares_multi<double>(cudaStream_t, std::int64_t, const SquaresMultiEntry*, std::int64_t,
                                                  double*, double*, double*);

}  // namespace wf::kernels::cuda
