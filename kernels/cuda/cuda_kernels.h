#pragma once
// The CUDA kernel backend (kernels/backend.h): every entry point launches CUDA kernels or cuBLASLt
// on the stream it is given, never waits for the device, and never reads device memory on the host.
//
// One class; its entries are defined by area, each in the file its section names below, beside the
// .cu file that holds that area's kernels. The .cpp files check arguments and choose the element
// type (kernels/cuda/dispatch.h); the .cu files hold the kernels and their launchers, declared in
// the area's header (kernels/cuda/<area>.h), which nvcc and the host compiler both read: those
// headers take native types (cudaStream_t, float, double, __nv_bfloat16 as wf::bf16's bits) and
// include no wallfacer header that needs fmt.
//
// Semantics are the CPU kernels' (kernels/cpu), to the tolerances tests/cuda states; where the
// CPU is bit-exact by design (counts, masks, the dropout stream, gathers) so is this backend.
#include "kernels/backend.h"

namespace wf::kernels::cuda {

class CudaKernels final : public Backend {
 public:
  // ---- kernels/cuda/cuda_kernels.cpp: identity, precision policy, per-process choices
  const char* name() const override;
  bool multiplies_natively(DType dtype) const override;
  int replicated_choice(std::string& reason) override;
  void adopt_replicated_choice(int code, const std::string& reason) override;

  // ---- kernels/cuda/movement.cpp (+ movement.cu): data movement
  void gather(const Stream& stream, std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
              const std::vector<std::int64_t>& src_stride, void* dst) override;
  void copy_blocks(const Stream& stream, std::size_t elem_size, const void* src, std::int64_t src_block,
                   std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                   std::int64_t outer, std::int64_t count) override;
  void select_rows(const Stream& stream, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                   std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                   void* out) override;
  void ulysses_block(const Stream& stream, const UlyssesBlock& block, void* tensor, void* message) override;

  // ---- kernels/cuda/elementwise.cpp (+ elementwise.cu): elementwise, dropout, scaling
  void binary_broadcast(const Stream& stream, DType dtype, BinaryOp op, const void* a,
                        const std::vector<std::int64_t>& a_shape, const void* b,
                        const std::vector<std::int64_t>& b_shape, void* out,
                        const std::vector<std::int64_t>& out_shape) override;
  void affine(const Stream& stream, DType dtype, std::int64_t n, double alpha, double shift, const void* x,
              void* out) override;
  void add_scaled(const Stream& stream, DType dtype, std::int64_t n, double alpha, const void* x,
                  void* y) override;
  void add_bias(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols, const void* x,
                const void* bias, void* out) override;
  void bias_residual_add(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                         const void* x, const void* bias, const void* residual, void* out) override;
  void unary_forward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* x,
                     void* y) override;
  void unary_backward(const Stream& stream, DType dtype, UnaryOp op, std::int64_t n, const void* saved,
                      const void* dy, void* dx) override;
  void dropout_mask(const Stream& stream, DType dtype, std::int64_t n, double p, std::uint64_t seed,
                    std::uint64_t first, const DropoutLayout& layout, const void* x, void* out) override;
  void clamp(const Stream& stream, DType dtype, std::int64_t n, double lo, double hi, const void* x,
             void* y) override;
  void scale_inplace(const Stream& stream, DType dtype, std::int64_t n, void* x, double alpha) override;
  void scale_inplace_by(const Stream& stream, DType dtype, std::int64_t n, void* x, const double* factor) override;
  void scale_by_coefficient(const Stream& stream, DType dtype, std::int64_t n, void* x,
                            const double* coefficient) override;

  // ---- kernels/cuda/reduce.cpp (+ reduce.cu): reductions, step totals, norms of the step
  void sum_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
               const void* x, void* out) override;
  void mean_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                std::int64_t inner, const void* x, void* out) override;
  void max_dim(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim, std::int64_t inner,
               const void* x, void* values, std::int64_t* argmax /*nullable*/) override;
  void max_dim_backward(const Stream& stream, DType dtype, std::int64_t outer, std::int64_t dim,
                        std::int64_t inner, const void* grad, const std::int64_t* argmax, void* dx) override;
  void reduce_broadcast(const Stream& stream, DType dtype, const void* grad,
                        const std::vector<std::int64_t>& out_shape, void* result,
                        const std::vector<std::int64_t>& in_shape) override;
  void sum_of_products(const Stream& stream, DType dtype, std::int64_t n, const void* x, const void* y,
                       double* out) override;
  void sum_of_squares_multi(const Stream& stream, DType dtype, const std::vector<TensorSpan>& tensors, double* out,
                            double* total) override;
  void count_not_equal(const Stream& stream, std::int64_t n, const std::int64_t* x, std::int64_t value,
                       std::int64_t* out) override;
  void loss_normaliser(const Stream& stream, const double* totals, double* out) override;
  void count_targets(const Stream& stream, const char* what, std::int64_t rows, std::int64_t vocab,
                     const std::int64_t* targets, std::int64_t ignore_index, std::int64_t* count) override;
  void clip_coefficient(const Stream& stream, std::int64_t parts, const double* sq_sums, double max_norm,
                        double* norm, double* coefficient) override;
  void replica_spread(const Stream& stream, std::int64_t n, const std::vector<std::int64_t>& ends,
                      const double* extremes, const double* own, double* out) override;

  // ---- kernels/cuda/norm.cpp (+ norm.cu): softmax, LayerNorm, RMSNorm
  void softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                       const void* x, void* y) override;
  void log_softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                           const void* x, void* y) override;
  void softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                        const void* y, const void* dy, void* dx) override;
  void log_softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                            const void* y, const void* dy, void* dx) override;
  void layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                         const void* x, const void* weight, const void* bias, double eps, void* y,
                         void* mean, void* rstd) override;
  void layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                          const void* x, const void* weight, const void* mean, const void* rstd,
                          const void* dy, void* dx, void* dweight, void* dbias) override;
  void rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                       const void* x, const void* weight, double eps, void* y, void* rstd) override;
  void rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                        const void* x, const void* weight, const void* rstd, const void* dy, void* dx,
                        void* dweight) override;
  void add_layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                             const void* x, const void* branch, const void* weight, const void* bias, double eps,
                             void* sum, void* y, void* mean, void* rstd) override;
  void add_layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                              const void* sum, const void* weight, const void* mean, const void* rstd,
                              const void* dy, const void* dsum_in, void* dsum, void* dweight, void* dbias) override;
  void add_rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                           const void* x, const void* branch, const void* weight, double eps, void* sum, void* y,
                           void* rstd) override;
  void add_rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                            const void* sum, const void* weight, const void* rstd, const void* dy,
                            const void* dsum_in, void* dsum, void* dweight) override;

  // ---- kernels/cuda/cross_entropy.cpp (+ cross_entropy.cu): cross-entropy, vocabulary-parallel cross-entropy
  void cross_entropy_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                             const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                             void* losses, void* lse, std::int64_t* count) override;
  void cross_entropy_reduce(const Stream& stream, DType dtype, std::int64_t rows, const void* losses,
                            const std::int64_t* count /*nullable*/, void* loss) override;
  void cross_entropy_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t vocab,
                              const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                              const void* lse, const void* grad_loss, const std::int64_t* count,
                              void* dlogits, const void* row_grad) override;
  void vocab_parallel_row_max(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                              std::int64_t own, const void* x, double* max) override;
  void vocab_parallel_partials(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                               std::int64_t own, std::int64_t start, const void* x, const double* max,
                               const std::int64_t* targets, std::int64_t ignore_index, double* sums) override;
  void vocab_parallel_loss(const Stream& stream, std::int64_t rows, const double* max, const double* sums,
                           const std::int64_t* targets, std::int64_t ignore_index,
                           const std::int64_t* count /*nullable*/, double* lse, double* loss) override;
  void vocab_parallel_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t k,
                               std::int64_t own, std::int64_t start, const void* x,
                               const std::int64_t* targets, std::int64_t ignore_index, const double* lse,
                               const void* grad_loss, const std::int64_t* count, void* dx) override;
  void vocab_parallel_local_ids(const Stream& stream, const char* what, std::int64_t n, std::int64_t vocab,
                                std::int64_t start, std::int64_t rows, const std::int64_t* ids,
                                std::int64_t* local, double* mask) override;

  // ---- kernels/cuda/embedding.cpp (+ embedding.cu, qkv_rope.cu): embedding, rotary positions, the QKV split
  void embedding_forward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                         std::int64_t vocab, const void* weight, const std::int64_t* ids, void* out) override;
  void embedding_backward(const Stream& stream, DType dtype, std::int64_t tokens, std::int64_t dim,
                          std::int64_t vocab, const std::int64_t* ids, const void* dout, void* dweight) override;
  void rope(const Stream& stream, DType dtype, const RopeShape& shape, const void* x,
            const std::int64_t* positions, bool inverse, void* y) override;
  void qkv_rope_forward(const Stream& stream, DType dtype, const QkvRopeShape& shape, const void* projected,
                        const std::int64_t* positions, void* q, void* k, void* v) override;
  void qkv_rope_backward(const Stream& stream, DType dtype, const QkvRopeShape& shape, const void* dq,
                         const void* dk, const void* dv, const std::int64_t* positions, void* d_projected) override;

  // ---- kernels/cuda/diffusion.cpp (+ diffusion.cu): diffusion noising and L_vb, timestep embedding
  void diffusion_noise(const Stream& stream, bool flow, std::int64_t batch, std::int64_t per_sample,
                       std::int64_t steps, const double* schedule, const double* times, const float* x0,
                       const float* noise, float* out) override;
  void diffusion_vb(const Stream& stream, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                    const double* schedule, const double* times, const double* v, const double* eps,
                    const float* x0, const float* x_t, double* d_v, double* total) override;
  void timestep_embedding(const Stream& stream, std::int64_t batch, std::int64_t channels,
                          double max_period, const double* times, float* out) override;

  // ---- kernels/cuda/optimizer.cpp (+ optimizer.cu): AdamW
  void adamw_step(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                  void* exp_avg, void* exp_avg_sq, const AdamWParams& params) override;
  void adamw_update(const Stream& stream, DType dtype, std::int64_t n, void* param, const void* grad,
                    void* exp_avg, void* exp_avg_sq, void* ema, const AdamWParams& params, const EmaParams& e,
                    std::int64_t* applied, const double* grad_norm) override;
  void adamw_update_multi(const Stream& stream, DType dtype, const std::vector<AdamWTensor>& tensors,
                          const AdamWParams& params, const EmaParams& e, const double* grad_norm) override;

  // ---- kernels/cuda/gemm.cpp: matrix products through cuBLASLt
  void gemm(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
            std::int64_t K, double alpha, const void* A, std::int64_t lda, const void* B, std::int64_t ldb,
            double beta, void* C, std::int64_t ldc) override;
  void gemm_batched(const Stream& stream, DType dtype, bool trans_a, bool trans_b, std::int64_t batch,
                    std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const void* A,
                    std::int64_t lda, std::int64_t stride_a, const void* B, std::int64_t ldb,
                    std::int64_t stride_b, double beta, void* C, std::int64_t ldc,
                    std::int64_t stride_c) override;
  void gemm_bf16(const Stream& stream, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                 std::int64_t K, float alpha, const bf16* A, std::int64_t lda, const bf16* B,
                 std::int64_t ldb, float beta, float* C, std::int64_t ldc) override;
  void linear_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                      std::int64_t out_features, const void* x, const void* weight, const void* bias,
                      void* y) override;
  void linear_gelu_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                           std::int64_t out_features, const void* x, const void* weight, const void* bias,
                           void* pre, void* y) override;
  bool fuses_linear_gelu(DType operands) const override;
  void linear_add_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                          std::int64_t out_features, const void* x, const void* weight, const void* bias,
                          const void* residual, void* y) override;
  bool fuses_linear_add(DType operands) const override;

  // ---- kernels/cuda/attention.cpp (+ attention.cu, sp_attention.cu): attention and its sequence-parallel pieces
  void attention_forward(const Stream& stream, DType operands, const AttentionShape& shape, const void* q,
                         const void* k, const void* v, void* o, void* lse) override;
  void attention_backward(const Stream& stream, DType operands, const AttentionShape& shape,
                          const void* q, const void* k, const void* v, const void* o, const void* lse,
                          const void* d_o, void* dq, void* dk, void* dv, bool accumulate,
                          const void* d_lse) override;
  void attention_merge(const Stream& stream, DType dtype, std::int64_t batch, std::int64_t q_len,
                       std::int64_t heads, std::int64_t head_dim, void* o, void* lse, const void* o_i,
                       const void* lse_i) override;
  void team_lse_combine(const Stream& stream, DType dtype, int members, std::int64_t rows, int member,
                        const void* all, void* lse_star, void* weight) override;
  void scale_attention_rows(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                            std::int64_t h, std::int64_t d, void* o, const void* weight) override;
  void attention_minus_delta(const Stream& stream, DType dtype, std::int64_t B, std::int64_t n,
                             std::int64_t h, std::int64_t d, const void* d_o, const void* o,
                             const void* d_lse, void* out) override;
};

}  // namespace wf::kernels::cuda
