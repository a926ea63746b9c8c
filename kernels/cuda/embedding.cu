// The embedding and RoPE kernels (kernels/cuda/embedding.h). The backward's scatter-add is made
// deterministic the CPU's way: group the tokens by id with a stable sort (CUB's radix sort of
// (id, token) pairs), then each distinct id is summed by one block, token by token in order.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/embedding.h"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// The scratch of the backward: four token arrays (sort keys and values, in and out) and CUB's
// storage, each at a 256-byte boundary.
constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Bits of the sort keys: ids in [0, vocab) and the sentinel vocab for a bad id (sorted last).
int key_bits(std::int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (std::int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

struct BackwardScratch {
  unsigned* keys_in;
  unsigned* keys_out;
  int* tokens_in;
  int* tokens_out;
  void* sort_storage;
};
BackwardScratch carve(void* base, std::int64_t tokens) {
  const std::size_t array = aligned(static_cast<std::size_t>(tokens) * sizeof(unsigned));
  char* p = static_cast<char*>(base);
  return {reinterpret_cast<unsigned*>(p), reinterpret_cast<unsigned*>(p + array), reinterpret_cast<int*>(p + 2 * array),
          reinterpret_cast<int*>(p + 3 * array), p + 4 * array};
}
// CUB's storage for sorting `tokens` pairs on `bits` key bits (a size query: no device work).
std::size_t sort_storage_bytes(std::int64_t tokens, int bits) {
  std::size_t bytes = 0;
  WF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const unsigned*>(nullptr),
                                                static_cast<unsigned*>(nullptr), static_cast<const int*>(nullptr),
                                                static_cast<int*>(nullptr), static_cast<int>(tokens), 0, bits));
  return bytes;
}

template <class T>
__global__ void embedding_forward_kernel(std::int64_t tokens, std::int64_t dim, std::int64_t vocab, const T* weight,
                                         const std::int64_t* ids, T* out, detail::DeviceErrorRecord* record,
                                         int message) {
  const std::int64_t n = tokens * dim;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t t = i / dim, j = i - t * dim;
    const std::int64_t id = ids[t];
    if (id < 0 || id >= vocab) {
      if (j == 0) report_device_error(record, message, t, id);
      out[i] = T(0);
    } else {
      out[i] = weight[id * dim + j];
    }
  }
}

// The sort's input: key = the id (vocab for a bad one, reported), value = the token.
__global__ void embedding_sort_keys_kernel(std::int64_t tokens, std::int64_t vocab, const std::int64_t* ids,
                                           unsigned* keys, int* token_of, detail::DeviceErrorRecord* record,
                                           int message) {
  WF_GRID_STRIDE_LOOP(t, tokens) {
    const std::int64_t id = ids[t];
    const bool valid = id >= 0 && id < vocab;
    if (!valid) report_device_error(record, message, t, id);
    keys[t] = static_cast<unsigned>(valid ? id : vocab);
    token_of[t] = static_cast<int>(t);
  }
}

// One block per sorted position p that starts an id's run (the others return at once): its
// threads take the columns, each summing the run's tokens in token order, in double.
template <class T>
__global__ void embedding_accumulate_kernel(std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                                            const unsigned* keys, const int* token_of, const T* dout, T* dweight) {
  for (std::int64_t p = blockIdx.x; p < tokens; p += gridDim.x) {
    const unsigned key = keys[p];
    if (static_cast<std::int64_t>(key) >= vocab || (p > 0 && keys[p - 1] == key)) continue;  // the whole block
    for (std::int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      double sum = 0.0;
      for (std::int64_t q = p; q < tokens && keys[q] == key; ++q) {
        sum += static_cast<double>(dout[static_cast<std::int64_t>(token_of[q]) * dim + j]);
      }
      T* w = dweight + static_cast<std::int64_t>(key) * dim + j;
      *w = static_cast<T>(static_cast<double>(*w) + sum);
    }
  }
}

template <class T>
__global__ void rope_kernel(std::int64_t batch, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                            const double* inv_freq, const T* x, const std::int64_t* positions, bool inverse, T* y) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t n = batch * tokens * heads * half;
  WF_GRID_STRIDE_LOOP(e, n) {
    const std::int64_t i = e % half, head_row = e / half;  // head_row = (b·tokens + t)·heads + h
    const std::int64_t t = (head_row / heads) % tokens;
    const double a = static_cast<double>(positions[t]) * inv_freq[i];
    double s = 0.0, c = 0.0;
    sincos(a, &s, &c);
    if (inverse) s = -s;  // the rotation by −a
    const std::int64_t base = head_row * head_dim;
    // Both channels of the pair are read before either is written: y may alias x.
    const double lo = static_cast<double>(x[base + i]), hi = static_cast<double>(x[base + i + half]);
    // Rounded products and sums (no fused multiply-add), as the CPU evaluates them.
    y[base + i] = static_cast<T>(__dsub_rn(__dmul_rn(lo, c), __dmul_rn(hi, s)));
    y[base + i + half] = static_cast<T>(__dadd_rn(__dmul_rn(lo, s), __dmul_rn(hi, c)));
  }
}

}  // namespace

template <class T>
void launch_embedding_forward(cudaStream_t stream, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                              const T* weight, const std::int64_t* ids, T* out, detail::DeviceErrorRecord* record,
                              int message) {
  const std::int64_t n = tokens * dim;
  if (n == 0) return;
  embedding_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(tokens, dim, vocab, weight, ids, out, record,
                                                                      message);
  WF_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

std::size_t embedding_backward_scratch_bytes(std::int64_t tokens, std::int64_t vocab) {
  const std::size_t array = aligned(static_cast<std::size_t>(tokens) * sizeof(unsigned));
  return 4 * array + sort_storage_bytes(tokens, key_bits(vocab));
}

template <class T>
void launch_embedding_backward(cudaStream_t stream, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                               const std::int64_t* ids, const T* dout, T* dweight, void* scratch,
                               std::size_t scratch_bytes, detail::DeviceErrorRecord* record, int message) {
  if (tokens == 0) return;
  const int bits = key_bits(vocab);
  // What embedding_backward_scratch_bytes added beyond the four arrays is CUB's.
  std::size_t sort_bytes = scratch_bytes - 4 * aligned(static_cast<std::size_t>(tokens) * sizeof(unsigned));
  const BackwardScratch s = carve(scratch, tokens);
  embedding_sort_keys_kernel<<<blocks_for(tokens), kThreads, 0, stream>>>(tokens, vocab, ids, s.keys_in,
                                                                          s.tokens_in, record, message);
  WF_CUDA_CHECK_LAUNCH("embedding_sort_keys_kernel");
  WF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.sort_storage, sort_bytes, s.keys_in, s.keys_out, s.tokens_in,
                                                s.tokens_out, static_cast<int>(tokens), 0, bits, stream));
  if (dim == 0) return;
  // Threads over the columns: a warp at least, 256 at most (dim 64..1600 in the models).
  const std::int64_t warps = (dim + 31) / 32;
  const int threads = static_cast<int>(32 * (warps < 8 ? warps : 8));
  const int blocks = static_cast<int>(tokens < kMaxBlocks ? tokens : kMaxBlocks);
  embedding_accumulate_kernel<T><<<blocks, threads, 0, stream>>>(tokens, dim, vocab, s.keys_out, s.tokens_out, dout,
                                                                 dweight);
  WF_CUDA_CHECK_LAUNCH("embedding_accumulate_kernel");
}

template <class T>
void launch_rope(cudaStream_t stream, std::int64_t batch, std::int64_t tokens, std::int64_t heads,
                 std::int64_t head_dim, const double* inv_freq, const T* x, const std::int64_t* positions,
                 bool inverse, T* y) {
  const std::int64_t n = batch * tokens * heads * (head_dim / 2);
  if (n == 0) return;
  rope_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(batch, tokens, heads, head_dim, inv_freq, x, positions,
                                                         inverse, y);
  WF_CUDA_CHECK_LAUNCH("rope_kernel");
}

#define WF_INSTANTIATE_EMBEDDING(T)                                                                                   \
  template void launch_embedding_forward<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t, const T*,        \
                                            const std::int64_t*, T*, detail::DeviceErrorRecord*, int);               \
  template void launch_embedding_backward<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t,                 \
                                             const std::int64_t*, const T*, T*, void*, std::size_t,                  \
                                             detail::DeviceErrorRecord*, int);                                       \
  template void launch_rope<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, const double*, \
                               const T*, const std::int64_t*, bool, T*);
WF_INSTANTIATE_EMBEDDING(float)
WF_INSTANTIATE_EMBEDDING(double)
#undef WF_INSTANTIATE_EMBEDDING

}  // namespace wf::kernels::cuda
