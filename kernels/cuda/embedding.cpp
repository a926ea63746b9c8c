// The embedding, RoPE and fused QKV split + RoPE entries of the CUDA backend: the CPU's argument checks on the host, the
// kernels of kernels/cuda/embedding.cu on the stream. Ids are data: a bad one is found by the
// kernel and raised at the next host synchronisation (kernels/cuda/data_error.h) with the CPU's
// message.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/data_error.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/qkv_rope.h"
#include "kernels/rope_frequencies.h"

namespace wf::kernels::cuda {
namespace {

// kernels/cpu/embedding.cpp's check_ids: its size check, and its message for an id the kernel
// finds outside the table.
DataError checked_ids(const Stream& stream, const char* what, std::int64_t tokens, std::int64_t dim,
                      std::int64_t vocab) {
  WF_CHECK(tokens >= 0 && dim >= 0 && vocab >= 0, "{}: sizes must be non-negative, got num_tokens={} dim={} vocab={}",
           what, tokens, dim, vocab);
  return data_error(stream, fmt::format("{}: token id {{1}} at index {{0}} is outside the vocabulary [0, {}); check "
                                        "the tokenizer's vocab size against the embedding table",
                                        what, vocab));
}

QkvDims qkv_dims(const QkvRopeShape& s) {
  return {s.batch * s.tokens, s.tokens, s.groups, s.group_size, s.head_dim};
}

}  // namespace

void CudaKernels::embedding_forward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                                    std::int64_t vocab, const void* weight, const std::int64_t* ids, void* out) {
  const DataError error = checked_ids(stream, "embedding_forward", tokens, dim, vocab);
  dispatch_floating(dtype, "embedding", [&](auto t) {
    using T = decltype(t);
    launch_embedding_forward<T>(native(stream), tokens, dim, vocab, static_cast<const T*>(weight), ids,
                                static_cast<T*>(out), error.record, error.message);
  });
}

void CudaKernels::embedding_backward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                                     std::int64_t vocab, const std::int64_t* ids, const void* dout, void* dweight) {
  const DataError error = checked_ids(stream, "embedding_backward", tokens, dim, vocab);
  // The sort keys are 32-bit ids (vocab itself marks a bad one) and the values 32-bit tokens.
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  WF_CHECK(tokens < kMax && vocab < kMax,
           "embedding_backward (cuda): at most {} tokens and table rows, got {} tokens and {} rows; split the batch",
           kMax - 1, tokens, vocab);
  if (tokens == 0) return;
  dispatch_floating(dtype, "embedding_backward", [&](auto t) {
    using T = decltype(t);
    const cudaStream_t native_stream = native(stream);  // the device current before CUB sizes its sort
    detail::CudaScratch scratch(stream, embedding_backward_scratch_bytes(tokens, vocab));
    launch_embedding_backward<T>(native_stream, tokens, dim, vocab, ids, static_cast<const T*>(dout),
                                 static_cast<T*>(dweight), scratch.data(), scratch.nbytes(), error.record,
                                 error.message);
  });
}

void CudaKernels::rope(const Stream& stream, DType dtype, const RopeShape& shape, const void* x,
                       const std::int64_t* positions, bool inverse, void* y) {
  check_rope_shape(shape, "rope");
  if (shape.batch * shape.tokens * shape.heads * (shape.head_dim / 2) == 0) return;
  const std::vector<double> inv_freq = rope_inverse_frequencies(shape.head_dim, shape.theta);
  const detail::CudaScratch table(stream, inv_freq.data(), inv_freq.size() * sizeof(double));
  dispatch_floating(dtype, "rope", [&](auto t) {
    using T = decltype(t);
    launch_rope<T>(native(stream), shape.batch, shape.tokens, shape.heads, shape.head_dim, table.as<const double>(),
                   static_cast<const T*>(x), positions, inverse, static_cast<T*>(y));
  });
}

void CudaKernels::qkv_rope_forward(const Stream& stream, DType dtype, const QkvRopeShape& shape,
                                   const void* projected, const std::int64_t* positions, void* q, void* k, void* v) {
  check_qkv_rope_shape(shape, "qkv_rope_forward");
  const QkvDims dims = qkv_dims(shape);
  if (dims.rows * dims.groups * shape.head_dim == 0) return;
  const std::vector<double> inv_freq = shape.rotate ? rope_inverse_frequencies(shape.head_dim, shape.theta)
                                                    : std::vector<double>();
  const detail::CudaScratch table(stream, inv_freq.data(), inv_freq.size() * sizeof(double));
  const double* freq = shape.rotate ? table.as<const double>() : nullptr;  // null: the plain split
  dispatch_floating(dtype, "qkv_rope_forward", [&](auto t) {
    using T = decltype(t);
    launch_qkv_rope_forward<T>(native(stream), dims, freq, positions, in<T>(projected), io<T>(q), io<T>(k), io<T>(v));
  });
}

void CudaKernels::qkv_rope_backward(const Stream& stream, DType dtype, const QkvRopeShape& shape, const void* dq,
                                    const void* dk, const void* dv, const std::int64_t* positions,
                                    void* d_projected) {
  check_qkv_rope_shape(shape, "qkv_rope_backward");
  const QkvDims dims = qkv_dims(shape);
  if (dims.rows * dims.groups * shape.head_dim == 0) return;
  const std::vector<double> inv_freq = shape.rotate ? rope_inverse_frequencies(shape.head_dim, shape.theta)
                                                    : std::vector<double>();
  const detail::CudaScratch table(stream, inv_freq.data(), inv_freq.size() * sizeof(double));
  const double* freq = shape.rotate ? table.as<const double>() : nullptr;
  dispatch_floating(dtype, "qkv_rope_backward", [&](auto t) {
    using T = decltype(t);
    launch_qkv_rope_backward<T>(native(stream), dims, freq, positions, in<T>(dq), in<T>(dk), in<T>(dv),
                                io<T>(d_projected));
  });
}

}  // namespace wf::kernels::cuda
