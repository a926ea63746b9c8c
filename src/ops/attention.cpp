// Differentiable attention on its device's attention kernels (kernels/backend.h).
//
// Both outputs carry gradients. The one arriving at lse matters to callers that merge
// partial results (ring attention, WallFacer) or use lse in a loss: since
// d lse_i / d s_ij = P_ij, it adds dlse_i·P_ij to dS, which is the kernel's usual
// dS = P∘(dP − D) with D_i replaced by D_i − dlse_i; the kernel takes dlse for that.
#include "wallfacer/ops/attention.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "src/ops/common.h"
#include "src/ops/document_attention.h"
#include "wallfacer/autograd/function.h"

namespace wf {
namespace {

using autograd::Context;
using autograd::TensorList;
using kernels::AttentionShape;

constexpr const char* kOp = "attention";

// The kernel shape of q [B, n_q, h, d], k and v [B, n_k, h_kv, d]; wf::Error naming the
// shapes when they do not fit together.
AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  for (const auto& [t, arg] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    ops::check_floating(kOp, *t, arg);
  }
  ops::kernels_for(kOp, {q, k, v});  // one device
  WF_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
           "{}: q, k and v must share a dtype, got q {}, k {}, v {}; convert with cast()", kOp, dtype_name(q.dtype()),
           dtype_name(k.dtype()), dtype_name(v.dtype()));
  WF_CHECK(q.dim() == 4, "{}: q must be [batch, q_len, heads, head_dim], got shape {}", kOp, shape_str(q.shape()));
  WF_CHECK(k.dim() == 4, "{}: k must be [batch, kv_len, kv_heads, head_dim], got shape {}", kOp,
           shape_str(k.shape()));
  WF_CHECK(k.shape() == v.shape(), "{}: k of shape {} and v of shape {} must have the same shape [batch, kv_len, "
           "kv_heads, head_dim]",
           kOp, shape_str(k.shape()), shape_str(v.shape()));
  WF_CHECK(q.size(0) == k.size(0), "{}: q of shape {} and k of shape {} have different batch sizes ({} vs {})", kOp,
           shape_str(q.shape()), shape_str(k.shape()), q.size(0), k.size(0));
  WF_CHECK(q.size(3) == k.size(3), "{}: q of shape {} and k of shape {} have different head dims ({} vs {})", kOp,
           shape_str(q.shape()), shape_str(k.shape()), q.size(3), k.size(3));
  WF_CHECK(k.size(2) >= 1 && q.size(2) % k.size(2) == 0,
           "{}: q of shape {} has {} heads, which is not a multiple of the {} kv heads of k (shape {}); "
           "grouped-query attention needs heads = kv_heads · group",
           kOp, shape_str(q.shape()), q.size(2), k.size(2), shape_str(k.shape()));

  AttentionShape s;
  s.batch = q.size(0);
  s.q_len = q.size(1);
  s.kv_len = k.size(1);
  s.heads = q.size(2);
  s.kv_heads = k.size(2);
  s.head_dim = q.size(3);
  s.causal = options.causal;
  s.q_offset = options.q_offset;
  s.kv_offset = options.kv_offset;
  s.scale = options.scale;
  kernels::check_attention_shape(s, kOp);  // sizes >= 1, offsets >= 0, finite scale
  ops::check_document_bounds(kOp, options.doc_bounds, s.batch,
                             std::max(s.q_offset + s.q_len, s.kv_offset + s.kv_len));
  return s;
}

// The kernel call of one attention, with packed documents inside it (document_attention.h):
// outputs are written whole, a query that sees no key getting o 0, lse −inf and gradients 0.
struct AttentionCalls {
  AttentionShape shape;
  std::shared_ptr<const ops::KeyWindows> windows;  // packed documents: shape.windows points into it

  AttentionCalls(const AttentionShape& s, const DocumentBounds& bounds) : shape(s) {
    if (bounds.empty()) return;
    windows = std::make_shared<const ops::KeyWindows>(ops::position_range(s.q_offset, s.q_len),
                                                      ops::position_range(s.kv_offset, s.kv_len), bounds, s.causal);
    shape = windows->applied_to(s);
  }

  void forward(const ops::Kernels& k, DType operands, const Tensor& q, const Tensor& kt, const Tensor& v, Tensor& out,
               Tensor& lse) const {
    k->attention_forward(k.stream, operands, shape, q.raw_data(), kt.raw_data(), v.raw_data(), out.raw_data(),
                         lse.raw_data());
  }

  void backward(const ops::Kernels& k, DType operands, const TensorList& s, const Tensor& d_o, const Tensor& d_lse,
                Tensor& dq, Tensor& dk, Tensor& dv) const {
    k->attention_backward(k.stream, operands, shape, s[0].raw_data(), s[1].raw_data(), s[2].raw_data(),
                          s[3].raw_data(), s[4].raw_data(), d_o.raw_data(), dq.raw_data(), dk.raw_data(),
                          dv.raw_data(), /*accumulate=*/false, d_lse.raw_data());
  }
};

// forward computes out and lse with the kernel; a replay (attention_replay) takes them from an
// earlier forward instead. Both save the same tensors and share one backward.
class Attention final : public autograd::Function {
 public:
  explicit Attention(AttentionCalls calls) : calls_(std::move(calls)) {}
  Attention(AttentionCalls calls, AttentionResult replayed)
      : calls_(std::move(calls)), is_replay_(true), replayed_(std::move(replayed)) {}

  // inputs: q, k, v; outputs: out [B, n_q, h, d], lse [B, h, n_q]
  TensorList forward(Context& ctx, const TensorList& in) override {
    if (is_replay_) return replay(ctx, in);
    const ops::Kernels k = ops::kernels_for(kOp, {in[0], in[1], in[2]});
    if (k->attention_operand_dtype(in[0].dtype()) == DType::bf16) {
      // bf16 dot products, f32 softmax: out and lse come back f32, saved so for the backward,
      // and rounded to bf16 for the caller.
      Tensor out = Tensor::empty(in[0].shape(), DType::f32, k.device());
      Tensor lse = Tensor::empty({calls_.shape.batch, calls_.shape.heads, calls_.shape.q_len}, DType::f32, k.device());
      calls_.forward(k, DType::bf16, in[0], in[1], in[2], out, lse);
      ctx.save_for_backward({in[0], in[1], in[2], out, lse});
      return TensorList{out.to(DType::bf16), lse.to(DType::bf16)};
    }
    return ops::compute_in(kOp, in[0].dtype(), in, [&](auto tag, const TensorList& c) {
      using T = decltype(tag);
      Tensor out = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
      Tensor lse = Tensor::empty({calls_.shape.batch, calls_.shape.heads, calls_.shape.q_len}, dtype_v<T>, k.device());
      calls_.forward(k, dtype_v<T>, c[0], c[1], c[2], out, lse);
      // out and lse in the compute dtype: a bf16 copy would perturb D = rowsum(dO∘O) and P.
      ctx.save_for_backward({in[0], in[1], in[2], out, lse});
      return TensorList{out, lse};
    });
  }

  TensorList backward(Context& ctx, const TensorList& grad) override {
    if (!ctx.needs_input_grad(0) && !ctx.needs_input_grad(1) && !ctx.needs_input_grad(2)) return TensorList(3);
    const TensorList& s = ctx.saved();  // q, k, v, out, lse
    const ops::Kernels k = ops::kernels_for(kOp, {s[0], s[1], s[2]});
    // d_lse is always passed: the engine hands zeros to an unused lse, and D − 0 is D exactly, so
    // no host read decides whether it matters.
    if (k->attention_operand_dtype(s[0].dtype()) == DType::bf16) {
      Tensor dq = Tensor::empty(s[0].shape(), DType::f32, k.device());
      Tensor dk = Tensor::empty(s[1].shape(), DType::f32, k.device());
      Tensor dv = Tensor::empty(s[2].shape(), DType::f32, k.device());
      const Tensor out = s[3].to(DType::f32), lse = s[4].to(DType::f32), d_o = grad[0].to(DType::bf16);
      const Tensor d_lse = grad[1].to(DType::f32);
      calls_.backward(k, DType::bf16, {s[0], s[1], s[2], out, lse}, d_o, d_lse, dq, dk, dv);
      return TensorList{ctx.needs_input_grad(0) ? dq.to(DType::bf16) : Tensor(),
                        ctx.needs_input_grad(1) ? dk.to(DType::bf16) : Tensor(),
                        ctx.needs_input_grad(2) ? dv.to(DType::bf16) : Tensor()};
    }
    return ops::compute_in(kOp, s[0].dtype(), {s[0], s[1], s[2], s[3], s[4], grad[0], grad[1]},
                           [&](auto tag, const TensorList& c) {
                             using T = decltype(tag);
                             Tensor dq = Tensor::empty(c[0].shape(), dtype_v<T>, k.device());
                             Tensor dk = Tensor::empty(c[1].shape(), dtype_v<T>, k.device());
                             Tensor dv = Tensor::empty(c[2].shape(), dtype_v<T>, k.device());
                             calls_.backward(k, dtype_v<T>, c, c[5], c[6], dq, dk, dv);
                             return TensorList{ctx.needs_input_grad(0) ? dq : Tensor(),
                                               ctx.needs_input_grad(1) ? dk : Tensor(),
                                               ctx.needs_input_grad(2) ? dv : Tensor()};
                           });
  }

  std::string name() const override { return is_replay_ ? "attention_replay" : kOp; }

 private:
  // The outputs of the earlier forward, handed back as they are; the backward widens them to
  // the compute dtype (a bf16 `out` saved by a caller is used as it is: its rounding shows in D).
  TensorList replay(Context& ctx, const TensorList& in) {
    ctx.save_for_backward({in[0], in[1], in[2], replayed_.out, replayed_.lse});
    TensorList outs{replayed_.out, replayed_.lse};
    replayed_ = {};  // the node's saved tensors hold them now; don't keep a second reference
    return outs;
  }

  AttentionCalls calls_;
  bool is_replay_ = false;
  AttentionResult replayed_;
};

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  const AttentionShape shape = attention_shape(q, k, v, options);
  TensorList outs =
      autograd::apply_function(std::make_shared<Attention>(AttentionCalls(shape, options.doc_bounds)), {q, k, v});
  return {outs[0], outs[1]};
}

AttentionResult attention_replay(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                                 const AttentionResult& saved) {
  const AttentionShape shape = attention_shape(q, k, v, options);
  const Shape lse_shape{shape.batch, shape.heads, shape.q_len};
  WF_CHECK(saved.out.defined() && saved.lse.defined() && saved.out.shape() == q.shape() &&
               saved.lse.shape() == lse_shape,
           "attention_replay: the saved result must be out {} and lse {} (what attention(q, k, v) returned for "
           "q {}), got out {} and lse {}",
           shape_str(q.shape()), shape_str(lse_shape), shape_str(q.shape()),
           saved.out.defined() ? shape_str(saved.out.shape()) : "undefined",
           saved.lse.defined() ? shape_str(saved.lse.shape()) : "undefined");
  WF_CHECK(saved.out.dtype() == q.dtype() || saved.out.dtype() == ops::compute_dtype(kOp, q.dtype()),
           "attention_replay: saved out has dtype {} but q has {}; replay the result of attention on these q, k, v",
           dtype_name(saved.out.dtype()), dtype_name(q.dtype()));
  // Detached: the replay node must not link back to whatever graph `saved` came from.
  TensorList outs = autograd::apply_function(
      std::make_shared<Attention>(AttentionCalls(shape, options.doc_bounds),
                                  AttentionResult{saved.out.detach(), saved.lse.detach()}),
      {q, k, v});
  return {outs[0], outs[1]};
}

}  // namespace wf
