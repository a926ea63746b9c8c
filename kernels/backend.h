#pragma once
// The kernel seam: every computation on tensor data goes through the kernel entry points of the
// backend of the device that holds the data (docs/devices.md).
//
// A backend is registered per device type. Ops pick it from their inputs' device in one place
// (src/ops/common.h: ops::kernels_for), allocate their outputs on that device and call these
// entry points with raw device pointers; nothing above `ops` (nn, parallel, train, models, comm)
// calls a backend's own kernels (kernels::cpu) directly. The CPU's backend runs kernels/cpu
// inline; the test device runs the same CPU kernels inside its memory's access scope on its
// streams; a CUDA backend launches CUDA kernels and cuBLAS on the stream.
//
// Contract of every entry point:
//   - it runs on `stream` (whose device is the backend's), in that stream's order; the host does
//     not wait for it, so a result is read on the host only through a copy (one host
//     synchronisation, counted);
//   - every pointer is device memory of the stream's device, contiguous, in the element type its
//     `dtype` argument names (void pointers) or its own type (typed pointers);
//   - floating kernels take f32 or f64 data (`dtype`); the ops turn bf16 and f16 into f32 around
//     them (ops::compute_in), except where a backend multiplies bf16 natively (gemm_bf16 and
//     attention with bf16 operands, when multiplies_natively(bf16));
//   - scalars that the step computes (a loss count, an upstream gradient, a norm) are passed as
//     device pointers, never read back by the caller: that is what keeps the step free of host
//     reads. Scalars known to the host (sizes, lr, eps) are plain arguments.
// Semantics of each kernel (aliasing, accumulation, NaN behaviour) are those of the CPU kernel
// of the same name in kernels/cpu, whose plain reference the tests compare against.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_args.h"
#include "kernels/sp_kernel_args.h"
#include "wallfacer/core/device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/stream.h"

namespace wf::kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // "cpu", "testdev", "cuda": the device type, for messages.
  virtual const char* name() const = 0;

  // ---- precision policy --------------------------------------------------------------------
  // Whether products of `dtype` operands run natively (bf16 on a CPU with AVX512_BF16 and
  // oneDNN, on every CUDA GPU). When false the ops widen such operands to f32 first.
  virtual bool multiplies_natively(DType dtype) const = 0;
  // The dtype attention's products take for activations of `activation` dtype: bf16 where it
  // multiplies natively, else the compute dtype (f32 for bf16/f16/f32, f64 for f64).
  DType attention_operand_dtype(DType activation) const;

  // ---- data movement (any dtype: only the element size matters) ----------------------------
  // dst (contiguous, out_shape) gathers src[Σ index[d]·src_stride[d]]: a permute (strides
  // permuted) or a broadcast (stride 0).
  virtual void gather(const Stream& stream, std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
                      const std::vector<std::int64_t>& src_stride, void* dst) = 0;
  // For o in [0, outer): copies `count` elements from src + (o·src_block + src_start) to
  // dst + (o·dst_block + dst_start) (a 2-D strided copy, cudaMemcpy2D's shape).
  virtual void copy_blocks(const Stream& stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                           std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                           std::int64_t outer, std::int64_t count) = 0;

  // ---- elementwise ---------------------------------------------------------------------------
  // out = a (op) b with NumPy broadcasting; shapes right-aligned to out_shape's rank by the caller.
  virtual void binary_broadcast(const Stream& stream, DType dtype, BinaryOp op, const void* a,
                                const std::vector<std::int64_t>& a_shape, const void* b,
                                const std::vector<std::int64_t>& b_shape, void* out,
                                const std::vector<std::int64_t>& out_shape) = 0;
  // out = alpha·x + shift
  virtual void affine(const Stream& stream, DType dtype, std::int64_t n, double alpha, double shift, const void* x,
                      void* out) = 0;
  // y += alpha·x
  virtual void add_scaled(const Stream& stream, DType dtype, std::int64_t n, double alpha, const void* x,
                          void* y) = 0;
  // out[r, c] = x[r, c] + bias[c]
  virtual void add_bias(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols, const void* x,
                        const void* bias, void* out) = 0;
  // out[r, c] = x[r, c] + bias[c] + residual[r, c] (bias nullable: out = x + residual)
  virtual void bias_residual_add(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                 const void* x, const void* bias, const void* residual, void* out) = 0;
  virtual void unary_forward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* x,
                             void* y) = 0;
  // dx = dy·f'(x), from `saved`: x for gelu and silu, the output y for tanh.
  virtual void unary_backward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* saved,
                              const void* dy, void* dx) = 0;
  // out = x masked and scaled by dropout's mask (kernel_args.h DropoutLayout).
  virtual void dropout_mask(const Stream& stream, DType dtype, std::int64_t n, double p, std::uint64_t seed,
                            std::uint64_t first, const DropoutLayout& layout, const void* x, void* out) = 0;

  // ---- reductions ([outer, dim, inner] views) ------------------------------------------------
  virtual void sum_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                       const void* x, void* out) = 0;
  virtual void mean_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                        std::int64_t inner, const void* x, void* out) = 0;
  virtual void max_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                       const void* x, void* values, std::int64_t* argmax /*nullable*/) = 0;
  // dx[o, argmax[o, i], i] = grad[o, i], the rest of dx 0 (overwritten).
  virtual void max_dim_backward(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                                std::int64_t inner, const void* grad, const std::int64_t* argmax, void* dx) = 0;
  // Sums a gradient of out_shape down to in_shape (both right-aligned to one rank).
  virtual void reduce_broadcast(const Stream& stream, DType dtype, const void* grad,
                                const std::vector<std::int64_t>& out_shape, void* result,
                                const std::vector<std::int64_t>& in_shape) = 0;
  // *out (one f64 on the device) = Σ x[i]·y[i], accumulated in double in a fixed order; with
  // y == x, the sum of squares.
  virtual void sum_of_products(const Stream& stream, DType dtype, std::int64_t n, const void* x, const void* y,
                               double* out) = 0;
  // out[i] (f64 on the device) = sum_of_products(tensors[i], tensors[i]) for every tensor of the list,
  // each exactly as that entry computes it (the same bits); then, total non-null (one f64 on the
  // device), *total += out[0] + out[1] + ..., one add at a time in list order: a gradient norm's
  // squares in a constant number of launches (kernel_args.h TensorSpan).
  virtual void sum_of_squares_multi(const Stream& stream, DType dtype, const std::vector<TensorSpan>& tensors,
                                    double* out, double* total) = 0;
  // ---- step totals: the loss and token counts the step keeps on the device -----------------
  // *out (one i64 on the device) = how many of x[0..n) differ from `value` (the targets that are
  // not ignored: the count that goes with a loss sum).
  virtual void count_not_equal(const Stream& stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                               std::int64_t* out) = 0;
  // totals = [loss sum, count] (two f64 on the device): out[0] = 1 / count, or 0 when count is 0
  // (every target ignored), and out[1] = sum · out[0], the mean loss (two f64 on the device).
  virtual void loss_normaliser(const Stream& stream, const double* totals, double* out) = 0;
  // x *= static_cast<T>(*factor), with the factor one f64 on the device (the step's normaliser).
  virtual void scale_inplace_by(const Stream& stream, DType dtype, std::int64_t n, void* x, const double* factor) = 0;

  // ---- softmax and norms over the last dim of [rows, cols] -----------------------------------
  virtual void softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                               const void* x, void* y) = 0;
  virtual void log_softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                   const void* x, void* y) = 0;
  virtual void softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                const void* y, const void* dy, void* dx) = 0;
  virtual void log_softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                    const void* y, const void* dy, void* dx) = 0;
  virtual void layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                 const void* x, const void* weight, const void* bias, double eps, void* y,
                                 void* mean, void* rstd) = 0;
  virtual void layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                  const void* x, const void* weight, const void* mean, const void* rstd,
                                  const void* dy, void* dx, void* dweight, void* dbias) = 0;
  virtual void rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                               const void* x, const void* weight, double eps, void* y, void* rstd) = 0;
  virtual void rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                const void* x, const void* weight, const void* rstd, const void* dy, void* dx,
                                void* dweight) = 0;
  // The residual add fused in front of the norm (kernels/cpu/norm.h's add_layernorm_forward...):
  // sum = x + branch and the norm of sum in one pass; the backward writes dsum = dx + dsum_in (nullable),
  // the gradient of both x and branch. Bitwise the unfused kernels followed by the add.
  virtual void add_layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                     const void* x, const void* branch, const void* weight, const void* bias,
                                     double eps, void* sum, void* y, void* mean, void* rstd) = 0;
  virtual void add_layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                      const void* sum, const void* weight, const void* mean, const void* rstd,
                                      const void* dy, const void* dsum_in, void* dsum, void* dweight,
                                      void* dbias) = 0;
  virtual void add_rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                   const void* x, const void* branch, const void* weight, double eps, void* sum,
                                   void* y, void* rstd) = 0;
  virtual void add_rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                    const void* sum, const void* weight, const void* rstd, const void* dy,
                                    const void* dsum_in, void* dsum, void* dweight) = 0;

  // ---- cross-entropy -------------------------------------------------------------------------
  // losses[r], lse[r] as kernels/cpu/cross_entropy.h, and *count (one i64 on the device) = the
  // rows whose target is not ignore_index. Targets outside [0, vocab) are an error.
  virtual void cross_entropy_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                                     const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                                     void* losses, void* lse, std::int64_t* count) = 0;
  // *loss (one element of dtype) = Σ losses, or that sum / *count (0 when count is 0) when
  // count is not null: the mean over counted rows.
  virtual void cross_entropy_reduce(const Stream& stream, DType dtype, std::int64_t rows, const void* losses,
                                    const std::int64_t* count /*nullable*/, void* loss) = 0;
  // dlogits = (softmax − onehot)·scale·row_grad[r], with scale = *grad_loss (one element of
  // dtype: the upstream gradient of the reduced loss), divided by *count when count is not
  // null (the mean). row_grad (reduction "none") is nullable.
  virtual void cross_entropy_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                                      const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                                      const void* lse, const void* grad_loss, const std::int64_t* count,
                                      void* dlogits, const void* row_grad) = 0;

  // ---- embedding and rotary positions --------------------------------------------------------
  virtual void embedding_forward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                                 std::int64_t vocab, const void* weight, const std::int64_t* ids, void* out) = 0;
  // dweight[ids[t]] += dout[t] (accumulated, deterministic).
  virtual void embedding_backward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                                  std::int64_t vocab, const std::int64_t* ids, const void* dout, void* dweight) = 0;
  virtual void rope(const Stream& stream, DType dtype, const RopeShape& shape, const void* x,
                    const std::int64_t* positions, bool inverse, void* y) = 0;
  // SelfAttention's QKV split with RoPE in one pass (kernels/cpu/qkv_rope.h): projected
  // [batch, tokens, groups, G + 2, head_dim] into contiguous q, k, v, q and k rotated unless
  // !shape.rotate (positions then unread). Bit for bit the split followed by rope() on the CPU.
  virtual void qkv_rope_forward(const Stream& stream, DType dtype, const QkvRopeShape& shape, const void* projected,
                                const std::int64_t* positions, void* q, void* k, void* v) = 0;
  // d_projected from dq, dk (rotated back) and dv; a null one writes zeros in its slots.
  virtual void qkv_rope_backward(const Stream& stream, DType dtype, const QkvRopeShape& shape, const void* dq,
                                 const void* dk, const void* dv, const std::int64_t* positions,
                                 void* d_projected) = 0;
  // ---- models: diffusion, timestep embedding, row selection, clamp ---------------------------
  // Diffusion noising and L_vb (kernels/cpu/diffusion.h): times [batch] and the ddpm schedule
  // table [steps, kScheduleColumns] (unread for flow) are f64 device tensors.
  virtual void diffusion_noise(const Stream& stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                               std::int64_t steps, const double* schedule, const double* times, const float* x0,
                               const float* noise, float* out) = 0;
  // *total (one f64 on the device) = Σ L_vb; d_v [batch·per_sample] its derivative by v.
  virtual void diffusion_vb(const Stream& stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                            const double* schedule, const double* times, const double* v, const double* eps,
                            const float* x0, const float* x_t, double* d_v, double* total) = 0;
  // out [batch, channels] f32 = DiT's sinusoidal embedding of times [batch] f64.
  virtual void timestep_embedding(const Stream& stream, std::int64_t batch, std::int64_t channels,
                                  double max_period, const double* times, float* out) = 0;
  // out[o, i] = x[o, positions[i]] for x [outer, rows, row_elems] (any dtype).
  virtual void select_rows(const Stream& stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                           std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                           void* out) = 0;
  // y = x clamped to [lo, hi]
  virtual void clamp(const Stream& stream, DType dtype, std::int64_t n, double lo, double hi, const void* x,
                     void* y) = 0;

  // ---- matrix products (row-major; kernels/cpu/gemm.h) ---------------------------------------
  virtual void gemm(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                    std::int64_t K, double alpha, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
                    double beta, void* C, std::int64_t ldc) = 0;
  virtual void gemm_batched(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t batch,
                            std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const void* A,
                            std::int64_t lda, std::int64_t stride_a, const void* B, std::int64_t ldb,
                            std::int64_t stride_b, double beta, void* C, std::int64_t ldc,
                            std::int64_t stride_c) = 0;
  // bf16 operands, f32 accumulation and result.
  virtual void gemm_bf16(const Stream& stream, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                         std::int64_t K, float alpha, const bf16* A, std::int64_t lda, const bf16* B,
                         std::int64_t ldb, float beta, float* C, std::int64_t ldc) = 0;
  // A linear layer's forward: y[rows, out] = x[rows, in]·weight[out, in]ᵀ (+ bias[out] on every
  // row; bias nullable: none). `operands` f32 or f64: x, weight, bias and y all of that dtype;
  // bf16 (where multiplies_natively(bf16)): x and weight bf16, bias and y f32, f32 accumulation.
  // The result is gemm (or gemm_bf16) with beta 0 followed by add_bias, as the CPU computes it; a
  // backend may fuse the bias into the product (cuBLASLt's epilogue) to save a pass over y.
  virtual void linear_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                              std::int64_t out_features, const void* x, const void* weight, const void* bias,
                              void* y) = 0;
  // The linear layer with GPT-2's GELU (the tanh approximation) after it: pre = linear_forward's y
  // (x·Wᵀ + bias; the pre-activation, what the backward reads) and y = gelu(pre), both [rows, out]
  // in linear_forward's result dtype (f32 for bf16 operands). Not pure: the default is exactly that
  // composition, linear_forward into pre then unary_forward(gelu) from pre into y, so a backend that
  // keeps it gives those bits. A backend may compute the GELU in the product's epilogue instead
  // (cuBLASLt), within the rounding of its own GELU.
  virtual void linear_gelu_forward(const Stream& stream, DType operands, std::int64_t rows,
                                   std::int64_t in_features, std::int64_t out_features, const void* x,
                                   const void* weight, const void* bias, void* pre, void* y);
  // Whether linear_gelu_forward may compute the GELU inside the product for `operands` (false: it
  // is the default composition). The ops ask it for bf16 activations: their unfused path rounds the
  // pre-activation to bf16 before the GELU (linear's output is bf16), which a fused epilogue cannot
  // (its pre-activation is f32), so where nothing is fused they keep that path and its bits.
  virtual bool fuses_linear_gelu(DType operands) const;
  // The linear layer with a residual added to its output (a projection onto the residual stream):
  // y = residual + (x·Wᵀ + bias), [rows, out], residual and y in linear_forward's result dtype (f32
  // for bf16 operands); y must not alias x, weight, bias or residual. Not pure: the default is
  // exactly the composition, linear_forward into y then binary_broadcast(add) of residual and y
  // into y, so a backend that keeps it gives those bits. A backend may add the residual in the
  // product's epilogue instead (cuBLASLt: C = residual with beta 1, the bias epilogue), within
  // the rounding of that sum (one rounding of acc + bias + residual instead of two).
  virtual void linear_add_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                                  std::int64_t out_features, const void* x, const void* weight, const void* bias,
                                  const void* residual, void* y);
  // Whether linear_add_forward may add the residual inside the product for `operands` (false: it
  // is the default composition). As fuses_linear_gelu: bf16 activations round linear's output to
  // bf16 before the add when unfused, which a fused epilogue cannot, so the ops take the one entry
  // for bf16 only where this says it fuses.
  virtual bool fuses_linear_add(DType operands) const;

  // ---- attention (kernel_args.h layouts) -----------------------------------------------------
  // `operands` is the dtype of q, k, v (and d_o): f32 or f64, with o, lse and the gradients in
  // the same dtype; or bf16 (where multiplies_natively(bf16)), with o, lse and the gradients f32.
  // One entry serves both, so every caller (the op, ring blocks, Ulysses heads) chooses the same
  // kernel for the same operands.
  virtual void attention_forward(const Stream& stream, DType operands, const AttentionShape& shape, const void* q,
                                 const void* k, const void* v, void* o, void* lse) = 0;
  // accumulate: gradients are added to dq, dk, dv. d_lse is nullable.
  virtual void attention_backward(const Stream& stream, DType operands, const AttentionShape& shape,
                                  const void* q, const void* k, const void* v, const void* o, const void* lse,
                                  const void* d_o, void* dq, void* dk, void* dv, bool accumulate,
                                  const void* d_lse) = 0;
  // Merges a partial (o_i, lse_i) into the running (o, lse) in place (f32 or f64).
  virtual void attention_merge(const Stream& stream, DType dtype, std::int64_t batch, std::int64_t q_len,
                               std::int64_t heads, std::int64_t head_dim, void* o, void* lse, const void* o_i,
                               const void* lse_i) = 0;

  // ---- sequence-parallel attention (src/parallel; kernels/cpu/sp_attention.h) ---------------
  // WallFacer's team combine: from the members' partial lse all [members, rows], lse_star[r] =
  // log Σ_c exp(all[c, r]) summed in member order (every member gets the same bits) and
  // weight[r] = exp(all[member, r] − lse_star[r]); −inf and 0 for a row no member saw.
  virtual void team_lse_combine(const Stream& stream, DType dtype, int members, std::int64_t rows, int member,
                                const void* all, void* lse_star, void* weight) = 0;
  // o [B, n, h, d]: o[b, i, head, :] *= weight[b, head, i] (weight [B, h, n]).
  virtual void scale_attention_rows(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                                    std::int64_t h, std::int64_t d, void* o, const void* weight) = 0;
  // out [B, h, n] = d_lse − rowsum(d_o∘o) over o, d_o [B, n, h, d]: attention's −D with the
  // gradient arriving at lse folded in (d_lse nullable: 0).
  virtual void attention_minus_delta(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                                     std::int64_t h, std::int64_t d, const void* d_o, const void* o,
                                     const void* d_lse, void* out) = 0;
  // Copies one tensor's block of a Ulysses all-to-all message between `tensor` and `message`
  // (the block's first byte; any alignment), as block.move says (kernels/sp_kernel_args.h).
  virtual void ulysses_block(const Stream& stream, const UlyssesBlock& block, void* tensor, void* message) = 0;

  // ---- optimizer -----------------------------------------------------------------------------
  virtual void adamw_step(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                          void* exp_avg, void* exp_avg_sq, const AdamWParams& params) = 0;
  // x *= alpha
  virtual void scale_inplace(const Stream& stream, DType dtype, std::int64_t n, void* x, double alpha) = 0;
  // ---- optimizer: the update skipped on the device ----
  // One parameter's AdamW step (ema non-null: and its EMA, e) only when *grad_norm is finite (null:
  // always), its bias correction from the updates applied so far, *applied (an i64 on the device,
  // incremented when the update applies; params.step is ignored): a diverged step is skipped
  // without the host reading its norm. kernels/cpu/optimizer.h's adamw_update.
  virtual void adamw_update(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                            void* exp_avg, void* exp_avg_sq, void* ema, const AdamWParams& params, const EmaParams& e,
                            std::int64_t* applied, const double* grad_norm) = 0;
  // adamw_update of every parameter of the list (kernel_args.h AdamWTensor: each with its own
  // *applied, read for its bias correction and EMA decay and incremented once when the update
  // applies), with one dtype, one AdamWParams (weight decay included) and one EmaParams: the
  // results of a loop of adamw_update over the list, bit for bit, in a constant number of launches.
  virtual void adamw_update_multi(const Stream& stream, DType dtype, const std::vector<AdamWTensor>& tensors,
                                  const AdamWParams& params, const EmaParams& e, const double* grad_norm) = 0;
  // ---- gradient clipping and vocabulary-parallel cross-entropy (kernels/cpu/optimizer.h,
  // kernels/cpu/vocab_parallel.h) ---------------------------------------------------------------
  // *norm = sqrt(Σ sq_sums[0..parts)) and *coefficient = clip_coefficient(*norm, max_norm), all
  // f64 on the device: the clipping decision stays where the gradients are.
  virtual void clip_coefficient(const Stream& stream, std::int64_t parts, const double* sq_sums, double max_norm,
                                double* norm, double* coefficient) = 0;
  // x *= *coefficient unless *coefficient >= 1 (NaN scales, as PyTorch does).
  virtual void scale_by_coefficient(const Stream& stream, DType dtype, std::int64_t n, void* x,
                                    const double* coefficient) = 0;
  // *count = the targets that are not ignore_index; any other target outside [0, vocab) is an
  // error naming `what` (a string literal), the row and the value.
  virtual void count_targets(const Stream& stream, const char* what, std::int64_t rows, std::int64_t vocab,
                             const std::int64_t* targets, std::int64_t ignore_index, std::int64_t* count) = 0;
  virtual void vocab_parallel_row_max(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                      std::int64_t own, const void* x, double* max) = 0;
  virtual void vocab_parallel_partials(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                       std::int64_t own, std::int64_t start, const void* x, const double* max,
                                       const std::int64_t* targets, std::int64_t ignore_index, double* sums) = 0;
  virtual void vocab_parallel_loss(const Stream& stream, std::int64_t rows, const double* max, const double* sums,
                                   const std::int64_t* targets, std::int64_t ignore_index,
                                   const std::int64_t* count /*nullable*/, double* lse, double* loss) = 0;
  // The scale is *grad_loss (one element of dtype), divided by *count when count is not null
  // (the mean; 0 when *count is 0).
  virtual void vocab_parallel_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                                       std::int64_t own, std::int64_t start, const void* x,
                                       const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                                       const void* grad_loss, const std::int64_t* count, void* dx) = 0;
  // kernels/cpu/vocab_parallel.h: the vocabulary-parallel embedding's local rows and 0/1 mask.
  virtual void vocab_parallel_local_ids(const Stream& stream, const char* what, std::int64_t n, std::int64_t vocab,
                                        std::int64_t start, std::int64_t rows, const std::int64_t* ids,
                                        std::int64_t* local, double* mask) = 0;
  // kernels/cpu/replica_spread.h: per replicated parameter, its spread over the tp ranks and its
  // largest entry (out [2·ends.size()], f64 on the device), for the replica check.
  virtual void replica_spread(const Stream& stream, std::int64_t n, const std::vector<std::int64_t>& ends,
                              const double* extremes, const double* own, double* out) = 0;
  // ---- per-process choices every rank must share ----
  // A choice this backend makes once per process that replicas of one computation must make
  // alike, lest they round differently (the CPU's GEMM library): its code (>= 0) and why, made on
  // one rank (wf::Error when it fails, e.g. a bad WF_CPU_GEMM); adopt_replicated_choice installs
  // that rank's on the others (comm::Runtime::init).
  virtual int replicated_choice(std::string& reason) = 0;
  virtual void adopt_replicated_choice(int code, const std::string& reason) = 0;
};

// The kernels of `device`'s type: the CPU's and the test device's are built in; a CUDA build
// registers its own. wf::Error naming the device when this build has none.
Backend& backend_for(Device device);
// Installs the backend of a device type (a CUDA backend at load time); replaces any earlier one.
void register_backend(DeviceType type, Backend* backend);

}  // namespace wf::kernels
