// The CUDA backend's attention entries and sequence-parallel attention's pieces: argument checks
// on the host (as the CPU kernels make them), the element type from the DType, and the launchers
// of attention.cu and sp_attention.cu.
#include "kernels/cuda/attention.h"

#include <algorithm>
#include <initializer_list>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {
namespace {

// The shape as the kernels read it: checked, head_dim within what the kernels' shared-memory
// tiles hold, and the scale resolved.
AttentionShape launch_shape(const AttentionShape& shape, const char* what) {
  check_attention_shape(shape, what);
  WF_CHECK(shape.head_dim <= kMaxAttentionHeadDim,
           "{} (cuda): head_dim {} exceeds the {} the CUDA kernels hold in shared memory; use more heads of a "
           "smaller head_dim",
           what, shape.head_dim, kMaxAttentionHeadDim);
  AttentionShape s = shape;
  s.scale = attention_scale(shape);
  return s;
}

// launch_shape's shape with its key windows (packed documents; host memory at the entry, checked
// there by check_attention_shape) copied to the device, where the kernels read them. The copy is
// queued on `stream` from a staged copy of the host array (so the caller may free it once the
// entry returns) and released in the stream's order after the kernels queued before this object
// goes (detail::CudaScratch).
class DeviceShape {
 public:
  DeviceShape(const Stream& stream, const AttentionShape& shape, const char* what)
      : shape_(launch_shape(shape, what)), windows_(stream, shape.windows.ranges, windows_bytes(shape)) {
    if (shape_.windows.ranges != nullptr) shape_.windows.ranges = windows_.as<const KeyRange>();
  }
  const AttentionShape& get() const { return shape_; }

 private:
  static std::size_t windows_bytes(const AttentionShape& shape) {
    if (shape.windows.ranges == nullptr) return 0;
    return static_cast<std::size_t>(shape.windows.lists * shape.q_len) * sizeof(KeyRange);
  }

  AttentionShape shape_;
  detail::CudaScratch windows_;
};

const __nv_bfloat16* in_bf16(const void* p) { return static_cast<const __nv_bfloat16*>(p); }

}  // namespace

void CudaKernels::attention_forward(const Stream& stream, DType operands, const AttentionShape& shape, const void* q,
                                    const void* k, const void* v, void* o, void* lse) {
  const DeviceShape device_shape(stream, shape, "attention_forward");
  const AttentionShape& s = device_shape.get();
  check_attention_pointers(s, "attention_forward", {q, o, lse}, {k, v});
  if (s.batch * s.q_len * s.heads == 0) return;
  // bf16: cuDNN's fused attention where the per-shape choice picked it (attention_choice.h).
  if (operands == DType::bf16 && attention_forward_by_choice(stream, s, q, k, v, io<float>(o), io<float>(lse))) return;
  if (operands == DType::bf16) {
    launch_attention_forward(native(stream), s, in_bf16(q), in_bf16(k), in_bf16(v), io<float>(o), io<float>(lse));
    return;
  }
  dispatch_floating(operands, "attention_forward", [&](auto t) {
    using T = decltype(t);
    launch_attention_forward(native(stream), s, in<T>(q), in<T>(k), in<T>(v), io<T>(o), io<T>(lse));
  });
}

void CudaKernels::attention_backward(const Stream& stream, DType operands, const AttentionShape& shape,
                                     const void* q, const void* k, const void* v, const void* o, const void* lse,
                                     const void* d_o, void* dq, void* dk, void* dv, bool accumulate,
                                     const void* d_lse) {
  const DeviceShape device_shape(stream, shape, "attention_backward");
  const AttentionShape& s = device_shape.get();
  check_attention_pointers(s, "attention_backward", {q, o, lse, d_o, dq}, {k, v, dk, dv});
  if (operands == DType::bf16 && attention_backward_by_choice(stream, s, q, k, v, in<float>(o), in<float>(lse), d_o,
                                                             io<float>(dq), io<float>(dk), io<float>(dv), accumulate,
                                                             d_lse)) {
    return;
  }
  // The backward's −D = d_lse − rowsum(dO∘O), one per query row, in the gradients' type.
  const auto rows = static_cast<std::size_t>(std::max<std::int64_t>(s.batch * s.heads * s.q_len, 1));
  if (operands == DType::bf16) {
    detail::CudaScratch minus_delta(stream, rows * sizeof(float));
    launch_attention_backward(native(stream), s, in_bf16(q), in_bf16(k), in_bf16(v), in<float>(o), in<float>(lse),
                              in_bf16(d_o), io<float>(dq), io<float>(dk), io<float>(dv), accumulate,
                              in<float>(d_lse), minus_delta.as<float>());
    return;
  }
  dispatch_floating(operands, "attention_backward", [&](auto t) {
    using T = decltype(t);
    detail::CudaScratch minus_delta(stream, rows * sizeof(T));
    launch_attention_backward(native(stream), s, in<T>(q), in<T>(k), in<T>(v), in<T>(o), in<T>(lse), in<T>(d_o),
                              io<T>(dq), io<T>(dk), io<T>(dv), accumulate, in<T>(d_lse), minus_delta.as<T>());
  });
}

void CudaKernels::attention_merge(const Stream& stream, DType dtype, std::int64_t batch, std::int64_t q_len,
                                  std::int64_t heads, std::int64_t head_dim, void* o, void* lse, const void* o_i,
                                  const void* lse_i) {
  WF_CHECK(batch >= 0 && q_len >= 0 && heads >= 1 && head_dim >= 1,
           "attention_merge: batch {}, q_len {} must be >= 0 and heads {}, head_dim {} >= 1", batch, q_len, heads,
           head_dim);
  const std::int64_t rows = batch * q_len * heads;
  if (rows > 0) WF_CHECK(o && lse && o_i && lse_i, "attention_merge: null pointer for {} rows", rows);
  dispatch_floating(dtype, "attention_merge", [&](auto t) {
    using T = decltype(t);
    launch_attention_merge(native(stream), batch, q_len, heads, head_dim, io<T>(o), io<T>(lse), in<T>(o_i),
                           in<T>(lse_i));
  });
}

void CudaKernels::team_lse_combine(const Stream& stream, DType dtype, int members, std::int64_t rows, int member,
                                   const void* all, void* lse_star, void* weight) {
  WF_CHECK(members >= 1 && member >= 0 && member < members && rows >= 0,
           "team_lse_combine: member {} of {} members over {} rows (members >= 1, 0 <= member < members, rows >= 0)",
           member, members, rows);
  dispatch_floating(dtype, "team_lse_combine", [&](auto t) {
    using T = decltype(t);
    launch_team_lse_combine(native(stream), members, rows, member, in<T>(all), io<T>(lse_star), io<T>(weight));
  });
}

void CudaKernels::scale_attention_rows(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                                       std::int64_t h, std::int64_t d, void* o, const void* weight) {
  WF_CHECK(B >= 0 && n >= 0 && h >= 1 && d >= 1,
           "scale_attention_rows: B {}, n {} must be >= 0 and h {}, d {} >= 1", B, n, h, d);
  dispatch_floating(dtype, "scale_attention_rows", [&](auto t) {
    using T = decltype(t);
    launch_scale_attention_rows(native(stream), B, n, h, d, io<T>(o), in<T>(weight));
  });
}

void CudaKernels::attention_minus_delta(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                                        std::int64_t h, std::int64_t d, const void* d_o, const void* o,
                                        const void* d_lse, void* out) {
  WF_CHECK(B >= 0 && n >= 0 && h >= 1 && d >= 1,
           "attention_minus_delta: B {}, n {} must be >= 0 and h {}, d {} >= 1", B, n, h, d);
  dispatch_floating(dtype, "attention_minus_delta", [&](auto t) {
    using T = decltype(t);
    launch_attention_minus_delta<T, T>(native(stream), B, n, h, d, in<T>(d_o), in<T>(o), in<T>(d_lse), io<T>(out));
  });
}

}  // namespace wf::kernels::cuda
