#pragma once
// The kernel entry points of kernels/backend.h implemented by the CPU kernels of this folder,
// for any backend whose memory the host can address: the CPU (run inline) and the test device
// (run on its stream, inside its memory's access scope). `Launch` says how a kernel runs:
//
//   struct Launch { template <class F> static void run(const Stream& stream, F&& kernel); };
//
// Every kernel below captures its arguments by value, so a Launch may queue it and run it
// later (the test device's asynchronous streams); shapes passed as vectors are copied for that.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/clamp.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/diffusion.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/qkv_rope.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/replica_spread.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/select_rows.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/sp_attention.h"
#include "kernels/cpu/step_totals.h"
#include "kernels/cpu/timestep_embedding.h"
#include "kernels/cpu/vocab_parallel.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

// Copies `elem_size`-byte elements through gather's permute/broadcast index map, and the 2-D
// strided block copy (kernels/cpu/movement.cpp).
void gather_elements(std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
                     const std::vector<std::int64_t>& src_stride, void* dst);
void copy_element_blocks(std::size_t elem_size, const void* src, std::int64_t src_block, std::int64_t src_start,
                         void* dst, std::int64_t dst_block, std::int64_t dst_start, std::int64_t outer,
                         std::int64_t count);

// An attention shape that owns its key windows: the shape's `windows.ranges` points at the
// caller's host memory, which may be gone when a queued kernel runs.
class OwnedAttentionShape {
 public:
  explicit OwnedAttentionShape(const AttentionShape& shape) : shape_(shape) {
    const AttentionWindows& w = shape.windows;
    if (w.ranges != nullptr) {
      ranges_ = std::make_shared<const std::vector<KeyRange>>(w.ranges, w.ranges + w.lists * shape.q_len);
      shape_.windows.ranges = ranges_->data();
    }
  }
  const AttentionShape& get() const { return shape_; }

 private:
  AttentionShape shape_;
  std::shared_ptr<const std::vector<KeyRange>> ranges_;
};

template <class Launch>
class HostKernels : public Backend {
 public:
  explicit HostKernels(const char* name) : name_(name) {}
  const char* name() const override { return name_; }

  bool multiplies_natively(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::f64 || (dtype == DType::bf16 && gemm_bf16_native());
  }

  void gather(const Stream& s, std::size_t elem_size, const void* src, const std::vector<std::int64_t>& out_shape,
              const std::vector<std::int64_t>& src_stride, void* dst) override {
    Launch::run(s, [=] { gather_elements(elem_size, src, out_shape, src_stride, dst); });
  }
  void copy_blocks(const Stream& s, std::size_t elem_size, const void* src, std::int64_t src_block,
                   std::int64_t src_start, void* dst, std::int64_t dst_block, std::int64_t dst_start,
                   std::int64_t outer, std::int64_t count) override {
    Launch::run(s, [=] {
      copy_element_blocks(elem_size, src, src_block, src_start, dst, dst_block, dst_start, outer, count);
    });
  }

  void binary_broadcast(const Stream& s, DType dt, BinaryOp op, const void* a, const std::vector<std::int64_t>& sa,
                        const void* b, const std::vector<std::int64_t>& sb, void* out,
                        const std::vector<std::int64_t>& so) override {
    typed(s, dt, "binary_broadcast", [=](auto t) {
      using T = decltype(t);
      cpu::binary_broadcast<T>(op, in<T>(a), sa.data(), in<T>(b), sb.data(), io<T>(out), so.data(),
                               static_cast<int>(so.size()));
    });
  }
  void affine(const Stream& s, DType dt, std::int64_t n, double alpha, double shift, const void* x,
              void* out) override {
    typed(s, dt, "affine", [=](auto t) {
      using T = decltype(t);
      cpu::affine<T>(n, static_cast<T>(alpha), static_cast<T>(shift), in<T>(x), io<T>(out));
    });
  }
  void add_scaled(const Stream& s, DType dt, std::int64_t n, double alpha, const void* x, void* y) override {
    typed(s, dt, "add_scaled", [=](auto t) {
      using T = decltype(t);
      cpu::add_scaled<T>(n, static_cast<T>(alpha), in<T>(x), io<T>(y));
    });
  }
  void add_bias(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x, const void* bias,
                void* out) override {
    typed(s, dt, "add_bias", [=](auto t) {
      using T = decltype(t);
      cpu::add_bias<T>(rows, cols, in<T>(x), in<T>(bias), io<T>(out));
    });
  }
  void bias_residual_add(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                         const void* bias, const void* residual, void* out) override {
    typed(s, dt, "bias_residual_add", [=](auto t) {
      using T = decltype(t);
      if (bias == nullptr) {
        cpu::residual_add<T>(rows * cols, in<T>(x), in<T>(residual), io<T>(out));
      } else {
        cpu::bias_residual_add<T>(rows, cols, in<T>(x), in<T>(bias), in<T>(residual), io<T>(out));
      }
    });
  }
  void unary_forward(const Stream& s, DType dt, UnaryOp op, std::int64_t n, const void* x, void* y) override {
    typed(s, dt, unary_op_name(op), [=](auto t) {
      using T = decltype(t);
      switch (op) {
        case UnaryOp::gelu: cpu::gelu_forward<T>(n, in<T>(x), io<T>(y)); break;
        case UnaryOp::silu: cpu::silu_forward<T>(n, in<T>(x), io<T>(y)); break;
        case UnaryOp::exp: cpu::exp_forward<T>(n, in<T>(x), io<T>(y)); break;
        case UnaryOp::ln: cpu::ln_forward<T>(n, in<T>(x), io<T>(y)); break;
        case UnaryOp::tanh: cpu::tanh_forward<T>(n, in<T>(x), io<T>(y)); break;
      }
    });
  }
  void unary_backward(const Stream& s, DType dt, UnaryOp op, std::int64_t n, const void* saved, const void* dy,
                      void* dx) override {
    WF_CHECK(op == UnaryOp::gelu || op == UnaryOp::silu || op == UnaryOp::tanh,
             "unary_backward: {}'s backward is an ordinary product or quotient; there is no kernel for it",
             unary_op_name(op));
    typed(s, dt, unary_op_name(op), [=](auto t) {
      using T = decltype(t);
      switch (op) {
        case UnaryOp::gelu: cpu::gelu_backward<T>(n, in<T>(saved), in<T>(dy), io<T>(dx)); break;
        case UnaryOp::silu: cpu::silu_backward<T>(n, in<T>(saved), in<T>(dy), io<T>(dx)); break;
        default: cpu::tanh_backward<T>(n, in<T>(saved), in<T>(dy), io<T>(dx)); break;
      }
    });
  }
  void dropout_mask(const Stream& s, DType dt, std::int64_t n, double p, std::uint64_t seed, std::uint64_t first,
                    const DropoutLayout& layout, const void* x, void* out) override {
    typed(s, dt, "dropout", [=](auto t) {
      using T = decltype(t);
      cpu::dropout_mask<T>(n, p, seed, first, layout, in<T>(x), io<T>(out));
    });
  }

  void sum_dim(const Stream& s, DType dt, std::int64_t outer, std::int64_t dim, std::int64_t inner, const void* x,
               void* out) override {
    typed(s, dt, "sum", [=](auto t) {
      using T = decltype(t);
      cpu::sum_dim<T>(outer, dim, inner, in<T>(x), io<T>(out));
    });
  }
  void mean_dim(const Stream& s, DType dt, std::int64_t outer, std::int64_t dim, std::int64_t inner, const void* x,
                void* out) override {
    typed(s, dt, "mean", [=](auto t) {
      using T = decltype(t);
      cpu::mean_dim<T>(outer, dim, inner, in<T>(x), io<T>(out));
    });
  }
  void max_dim(const Stream& s, DType dt, std::int64_t outer, std::int64_t dim, std::int64_t inner, const void* x,
               void* values, std::int64_t* argmax) override {
    typed(s, dt, "max", [=](auto t) {
      using T = decltype(t);
      cpu::max_dim<T>(outer, dim, inner, in<T>(x), io<T>(values), argmax);
    });
  }
  void max_dim_backward(const Stream& s, DType dt, std::int64_t outer, std::int64_t dim, std::int64_t inner,
                        const void* grad, const std::int64_t* argmax, void* dx) override {
    typed(s, dt, "max_backward", [=](auto t) {
      using T = decltype(t);
      cpu::max_dim_backward<T>(outer, dim, inner, in<T>(grad), argmax, io<T>(dx));
    });
  }
  void reduce_broadcast(const Stream& s, DType dt, const void* grad, const std::vector<std::int64_t>& out_shape,
                        void* result, const std::vector<std::int64_t>& in_shape) override {
    typed(s, dt, "sum_to_shape", [=](auto t) {
      using T = decltype(t);
      cpu::reduce_broadcast<T>(in<T>(grad), out_shape.data(), io<T>(result), in_shape.data(),
                               static_cast<int>(out_shape.size()));
    });
  }
  void sum_of_products(const Stream& s, DType dt, std::int64_t n, const void* x, const void* y,
                       double* out) override {
    typed(s, dt, "sum_of_products", [=](auto t) {
      using T = decltype(t);
      *out = cpu::sum_of_products<T>(n, in<T>(x), in<T>(y));
    });
  }
  void sum_of_squares_multi(const Stream& s, DType dt, const std::vector<TensorSpan>& tensors, double* out,
                            double* total) override {
    check_tensor_spans(tensors, "sum_of_squares_multi");
    typed(s, dt, "sum_of_squares_multi", [=](auto t) {
      using T = decltype(t);
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        out[i] = cpu::sum_of_squares<T>(tensors[i].n, in<T>(tensors[i].data));
      }
      if (total == nullptr) return;
      for (std::size_t i = 0; i < tensors.size(); ++i) *total += out[i];
    });
  }
  // ---- step totals ----
  void count_not_equal(const Stream& s, std::int64_t n, const std::int64_t* x, std::int64_t value,
                       std::int64_t* out) override {
    Launch::run(s, [=] { *out = cpu::count_not_equal(n, x, value); });
  }
  void loss_normaliser(const Stream& s, const double* totals, double* out) override {
    Launch::run(s, [=] { cpu::loss_normaliser(totals, out); });
  }
  void scale_inplace_by(const Stream& s, DType dt, std::int64_t n, void* x, const double* factor) override {
    typed(s, dt, "scale_inplace_by", [=](auto t) {
      using T = decltype(t);
      cpu::scale_inplace<T>(n, io<T>(x), static_cast<T>(*factor));
    });
  }

  void softmax_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                       void* y) override {
    typed(s, dt, "softmax", [=](auto t) {
      using T = decltype(t);
      cpu::softmax_forward<T>(rows, cols, in<T>(x), io<T>(y));
    });
  }
  void log_softmax_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                           void* y) override {
    typed(s, dt, "log_softmax", [=](auto t) {
      using T = decltype(t);
      cpu::log_softmax_forward<T>(rows, cols, in<T>(x), io<T>(y));
    });
  }
  void softmax_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* y,
                        const void* dy, void* dx) override {
    typed(s, dt, "softmax_backward", [=](auto t) {
      using T = decltype(t);
      cpu::softmax_backward<T>(rows, cols, in<T>(y), in<T>(dy), io<T>(dx));
    });
  }
  void log_softmax_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* y,
                            const void* dy, void* dx) override {
    typed(s, dt, "log_softmax_backward", [=](auto t) {
      using T = decltype(t);
      cpu::log_softmax_backward<T>(rows, cols, in<T>(y), in<T>(dy), io<T>(dx));
    });
  }
  void layernorm_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                         const void* weight, const void* bias, double eps, void* y, void* mean,
                         void* rstd) override {
    typed(s, dt, "layer_norm", [=](auto t) {
      using T = decltype(t);
      cpu::layernorm_forward<T>(rows, cols, in<T>(x), in<T>(weight), in<T>(bias), eps, io<T>(y), io<T>(mean),
                                io<T>(rstd));
    });
  }
  void layernorm_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                          const void* weight, const void* mean, const void* rstd, const void* dy, void* dx,
                          void* dweight, void* dbias) override {
    typed(s, dt, "layer_norm_backward", [=](auto t) {
      using T = decltype(t);
      cpu::layernorm_backward<T>(rows, cols, in<T>(x), in<T>(weight), in<T>(mean), in<T>(rstd), in<T>(dy),
                                 io<T>(dx), io<T>(dweight), io<T>(dbias));
    });
  }
  void rmsnorm_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                       const void* weight, double eps, void* y, void* rstd) override {
    typed(s, dt, "rms_norm", [=](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_forward<T>(rows, cols, in<T>(x), in<T>(weight), eps, io<T>(y), io<T>(rstd));
    });
  }
  void rmsnorm_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                        const void* weight, const void* rstd, const void* dy, void* dx, void* dweight) override {
    typed(s, dt, "rms_norm_backward", [=](auto t) {
      using T = decltype(t);
      cpu::rmsnorm_backward<T>(rows, cols, in<T>(x), in<T>(weight), in<T>(rstd), in<T>(dy), io<T>(dx),
                               io<T>(dweight));
    });
  }
  void add_layernorm_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                             const void* branch, const void* weight, const void* bias, double eps, void* sum,
                             void* y, void* mean, void* rstd) override {
    typed(s, dt, "add_layer_norm", [=](auto t) {
      using T = decltype(t);
      cpu::add_layernorm_forward<T>(rows, cols, in<T>(x), in<T>(branch), in<T>(weight), in<T>(bias), eps,
                                    io<T>(sum), io<T>(y), io<T>(mean), io<T>(rstd));
    });
  }
  void add_layernorm_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* sum,
                              const void* weight, const void* mean, const void* rstd, const void* dy,
                              const void* dsum_in, void* dsum, void* dweight, void* dbias) override {
    typed(s, dt, "add_layer_norm_backward", [=](auto t) {
      using T = decltype(t);
      cpu::add_layernorm_backward<T>(rows, cols, in<T>(sum), in<T>(weight), in<T>(mean), in<T>(rstd), in<T>(dy),
                                     in<T>(dsum_in), io<T>(dsum), io<T>(dweight), io<T>(dbias));
    });
  }
  void add_rmsnorm_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* x,
                           const void* branch, const void* weight, double eps, void* sum, void* y,
                           void* rstd) override {
    typed(s, dt, "add_rms_norm", [=](auto t) {
      using T = decltype(t);
      cpu::add_rmsnorm_forward<T>(rows, cols, in<T>(x), in<T>(branch), in<T>(weight), eps, io<T>(sum), io<T>(y),
                                  io<T>(rstd));
    });
  }
  void add_rmsnorm_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t cols, const void* sum,
                            const void* weight, const void* rstd, const void* dy, const void* dsum_in, void* dsum,
                            void* dweight) override {
    typed(s, dt, "add_rms_norm_backward", [=](auto t) {
      using T = decltype(t);
      cpu::add_rmsnorm_backward<T>(rows, cols, in<T>(sum), in<T>(weight), in<T>(rstd), in<T>(dy), in<T>(dsum_in),
                                   io<T>(dsum), io<T>(dweight));
    });
  }

  void cross_entropy_forward(const Stream& s, DType dt, std::int64_t rows, std::int64_t vocab, const void* logits,
                             const std::int64_t* targets, std::int64_t ignore_index, void* losses, void* lse,
                             std::int64_t* count) override {
    typed(s, dt, "cross_entropy", [=](auto t) {
      using T = decltype(t);
      *count = cpu::cross_entropy_forward<T>(rows, vocab, in<T>(logits), targets, ignore_index, io<T>(losses),
                                             io<T>(lse));
    });
  }
  void cross_entropy_reduce(const Stream& s, DType dt, std::int64_t rows, const void* losses,
                            const std::int64_t* count, void* loss) override {
    typed(s, dt, "cross_entropy", [=](auto t) {
      using T = decltype(t);
      *io<T>(loss) = count == nullptr ? cpu::cross_entropy_sum<T>(rows, in<T>(losses))
                                      : cpu::cross_entropy_mean<T>(rows, in<T>(losses), *count);
    });
  }
  void cross_entropy_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t vocab, const void* logits,
                              const std::int64_t* targets, std::int64_t ignore_index, const void* lse,
                              const void* grad_loss, const std::int64_t* count, void* dlogits,
                              const void* row_grad) override {
    typed(s, dt, "cross_entropy_backward", [=](auto t) {
      using T = decltype(t);
      // d(mean)/d(loss_r) = 1/count (d(sum)/d(loss_r) = 1), times the upstream gradient of the
      // reduced loss. With every row ignored the loss is the constant 0 and every gradient is 0.
      const double g = double(*in<T>(grad_loss));
      const double grad_scale = count == nullptr ? g : *count > 0 ? g / double(*count) : 0.0;
      cpu::cross_entropy_backward<T>(rows, vocab, in<T>(logits), targets, ignore_index, in<T>(lse), grad_scale,
                                     io<T>(dlogits), in<T>(row_grad));
    });
  }

  void embedding_forward(const Stream& s, DType dt, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                         const void* weight, const std::int64_t* ids, void* out) override {
    typed(s, dt, "embedding", [=](auto t) {
      using T = decltype(t);
      cpu::embedding_forward<T>(tokens, dim, vocab, in<T>(weight), ids, io<T>(out));
    });
  }
  void embedding_backward(const Stream& s, DType dt, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                          const std::int64_t* ids, const void* dout, void* dweight) override {
    typed(s, dt, "embedding_backward", [=](auto t) {
      using T = decltype(t);
      cpu::embedding_backward<T>(tokens, dim, vocab, ids, in<T>(dout), io<T>(dweight));
    });
  }
  void rope(const Stream& s, DType dt, const RopeShape& shape, const void* x, const std::int64_t* positions,
            bool inverse, void* y) override {
    typed(s, dt, "rope", [=](auto t) {
      using T = decltype(t);
      cpu::rope<T>(shape, in<T>(x), positions, inverse, io<T>(y));
    });
  }
  void qkv_rope_forward(const Stream& s, DType dt, const QkvRopeShape& shape, const void* projected,
                        const std::int64_t* positions, void* q, void* k, void* v) override {
    typed(s, dt, "qkv_rope", [=](auto t) {
      using T = decltype(t);
      cpu::qkv_rope_forward<T>(shape, in<T>(projected), positions, io<T>(q), io<T>(k), io<T>(v));
    });
  }
  void qkv_rope_backward(const Stream& s, DType dt, const QkvRopeShape& shape, const void* dq, const void* dk,
                         const void* dv, const std::int64_t* positions, void* d_projected) override {
    typed(s, dt, "qkv_rope_backward", [=](auto t) {
      using T = decltype(t);
      cpu::qkv_rope_backward<T>(shape, in<T>(dq), in<T>(dk), in<T>(dv), positions, io<T>(d_projected));
    });
  }
  // ---- models: diffusion, timestep embedding, row selection, clamp ---------------------------
  void diffusion_noise(const Stream& s, bool flow, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                       const double* schedule, const double* times, const float* x0, const float* noise,
                       float* out) override {
    Launch::run(s, [=] { cpu::diffusion_noise(flow, batch, per_sample, steps, schedule, times, x0, noise, out); });
  }
  void diffusion_vb(const Stream& s, std::int64_t batch, std::int64_t per_sample, std::int64_t steps,
                    const double* schedule, const double* times, const double* v, const double* eps, const float* x0,
                    const float* x_t, double* d_v, double* total) override {
    Launch::run(s, [=] { cpu::diffusion_vb(batch, per_sample, steps, schedule, times, v, eps, x0, x_t, d_v, total); });
  }
  void timestep_embedding(const Stream& s, std::int64_t batch, std::int64_t channels, double max_period,
                          const double* times, float* out) override {
    Launch::run(s, [=] { cpu::timestep_embedding(batch, channels, max_period, times, out); });
  }
  void select_rows(const Stream& s, std::size_t elem_size, std::int64_t outer, std::int64_t rows,
                   std::int64_t row_elems, const void* x, std::int64_t n, const std::int64_t* positions,
                   void* out) override {
    Launch::run(s, [=] { cpu::select_rows(elem_size, outer, rows, row_elems, x, n, positions, out); });
  }
  void clamp(const Stream& s, DType dt, std::int64_t n, double lo, double hi, const void* x, void* y) override {
    typed(s, dt, "clamp", [=](auto t) {
      using T = decltype(t);
      cpu::clamp<T>(n, static_cast<T>(lo), static_cast<T>(hi), in<T>(x), io<T>(y));
    });
  }

  void gemm(const Stream& s, DType dt, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
            const void* A, std::int64_t lda, const void* B, std::int64_t ldb, double beta, void* C,
            std::int64_t ldc) override {
    typed(s, dt, "gemm", [=](auto t) {
      using T = decltype(t);
      cpu::gemm<T>(ta, tb, M, N, K, static_cast<T>(alpha), in<T>(A), lda, in<T>(B), ldb, static_cast<T>(beta),
                   io<T>(C), ldc);
    });
  }
  void gemm_batched(const Stream& s, DType dt, bool ta, bool tb, std::int64_t batch, std::int64_t M, std::int64_t N,
                    std::int64_t K, double alpha, const void* A, std::int64_t lda, std::int64_t stride_a,
                    const void* B, std::int64_t ldb, std::int64_t stride_b, double beta, void* C, std::int64_t ldc,
                    std::int64_t stride_c) override {
    typed(s, dt, "gemm_batched", [=](auto t) {
      using T = decltype(t);
      cpu::gemm_batched<T>(ta, tb, batch, M, N, K, static_cast<T>(alpha), in<T>(A), lda, stride_a, in<T>(B), ldb,
                           stride_b, static_cast<T>(beta), io<T>(C), ldc, stride_c);
    });
  }
  void gemm_bf16(const Stream& s, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                 const bf16* A, std::int64_t lda, const bf16* B, std::int64_t ldb, float beta, float* C,
                 std::int64_t ldc) override {
    Launch::run(s, [=] { cpu::gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  // The product, then the bias: the CPU has no fused epilogue, so this is what linear computed before.
  void linear_forward(const Stream& s, DType operands, std::int64_t rows, std::int64_t in_features,
                      std::int64_t out_features, const void* x, const void* weight, const void* bias,
                      void* y) override {
    if (operands == DType::bf16) {
      gemm_bf16(s, false, true, rows, out_features, in_features, 1.0f, in<bf16>(x), in_features, in<bf16>(weight),
                in_features, 0.0f, io<float>(y), out_features);
    } else {
      gemm(s, operands, false, true, rows, out_features, in_features, 1.0, x, in_features, weight, in_features, 0.0, y,
           out_features);
    }
    if (bias != nullptr) {
      add_bias(s, operands == DType::bf16 ? DType::f32 : operands, rows, out_features, y, bias, y);
    }
  }

  void attention_forward(const Stream& s, DType operands, const AttentionShape& call, const void* q, const void* k,
                         const void* v, void* o, void* lse) override {
    const OwnedAttentionShape owned(call);
    if (operands == DType::bf16) {
      Launch::run(s, [=] {
        cpu::attention_forward_bf16(owned.get(), in<bf16>(q), in<bf16>(k), in<bf16>(v), io<float>(o), io<float>(lse));
      });
      return;
    }
    typed(s, operands, "attention", [=](auto t) {
      using T = decltype(t);
      cpu::attention_forward<T>(owned.get(), in<T>(q), in<T>(k), in<T>(v), io<T>(o), io<T>(lse));
    });
  }
  void attention_backward(const Stream& s, DType operands, const AttentionShape& call, const void* q, const void* k,
                          const void* v, const void* o, const void* lse, const void* d_o, void* dq, void* dk,
                          void* dv, bool accumulate, const void* d_lse) override {
    const OwnedAttentionShape owned(call);
    if (operands == DType::bf16) {
      Launch::run(s, [=] {
        cpu::attention_backward_bf16(owned.get(), in<bf16>(q), in<bf16>(k), in<bf16>(v), in<float>(o), in<float>(lse),
                                     in<bf16>(d_o), io<float>(dq), io<float>(dk), io<float>(dv), accumulate,
                                     in<float>(d_lse));
      });
      return;
    }
    typed(s, operands, "attention_backward", [=](auto t) {
      using T = decltype(t);
      cpu::attention_backward<T>(owned.get(), in<T>(q), in<T>(k), in<T>(v), in<T>(o), in<T>(lse), in<T>(d_o), io<T>(dq),
                                 io<T>(dk), io<T>(dv), accumulate, in<T>(d_lse));
    });
  }
  void attention_merge(const Stream& s, DType dt, std::int64_t batch, std::int64_t q_len, std::int64_t heads,
                       std::int64_t head_dim, void* o, void* lse, const void* o_i, const void* lse_i) override {
    typed(s, dt, "attention_merge", [=](auto t) {
      using T = decltype(t);
      cpu::attention_merge<T>(batch, q_len, heads, head_dim, io<T>(o), io<T>(lse), in<T>(o_i), in<T>(lse_i));
    });
  }

  // ---- sequence-parallel attention ----
  void team_lse_combine(const Stream& s, DType dt, int members, std::int64_t rows, int member, const void* all,
                        void* lse_star, void* weight) override {
    typed(s, dt, "team_lse_combine", [=](auto t) {
      using T = decltype(t);
      cpu::team_lse_combine<T>(members, rows, member, in<T>(all), io<T>(lse_star), io<T>(weight));
    });
  }
  void scale_attention_rows(const Stream& s, DType dt, std::int64_t B, std::int64_t n, std::int64_t h,
                            std::int64_t d, void* o, const void* weight) override {
    typed(s, dt, "scale_attention_rows", [=](auto t) {
      using T = decltype(t);
      cpu::scale_attention_rows<T>(B, n, h, d, io<T>(o), in<T>(weight));
    });
  }
  void attention_minus_delta(const Stream& s, DType dt, std::int64_t B, std::int64_t n, std::int64_t h,
                             std::int64_t d, const void* d_o, const void* o, const void* d_lse, void* out) override {
    typed(s, dt, "attention_minus_delta", [=](auto t) {
      using T = decltype(t);
      cpu::attention_minus_delta<T>(B, n, h, d, in<T>(d_o), in<T>(o), in<T>(d_lse), io<T>(out));
    });
  }
  void ulysses_block(const Stream& s, const UlyssesBlock& block, void* tensor, void* message) override {
    check_ulysses_block(block);  // on the host: a queued kernel has no caller to throw to
    Launch::run(s, [=] { cpu::ulysses_block(block, tensor, message); });
  }

  void adamw_step(const Stream& s, DType dt, std::int64_t n, void* param, const void* grad, void* exp_avg,
                  void* exp_avg_sq, const AdamWParams& p) override {
    typed(s, dt, "adamw_step", [=](auto t) {
      using T = decltype(t);
      cpu::adamw_step<T>(n, io<T>(param), in<T>(grad), io<T>(exp_avg), io<T>(exp_avg_sq), p);
    });
  }
  void scale_inplace(const Stream& s, DType dt, std::int64_t n, void* x, double alpha) override {
    typed(s, dt, "scale_inplace", [=](auto t) {
      using T = decltype(t);
      cpu::scale_inplace<T>(n, io<T>(x), static_cast<T>(alpha));
    });
  }
  // ---- optimizer: the update skipped on the device ----
  void adamw_update(const Stream& s, DType dt, std::int64_t n, void* param, const void* grad, void* exp_avg,
                    void* exp_avg_sq, void* ema, const AdamWParams& p, const EmaParams& e, std::int64_t* applied,
                    const double* grad_norm) override {
    typed(s, dt, "adamw_update", [=](auto t) {
      using T = decltype(t);
      cpu::adamw_update<T>(n, io<T>(param), in<T>(grad), io<T>(exp_avg), io<T>(exp_avg_sq), io<T>(ema), p, e, applied,
                           grad_norm);
    });
  }
  // The loop the entry replaces, in list order, as one kernel on the stream.
  void adamw_update_multi(const Stream& s, DType dt, const std::vector<AdamWTensor>& tensors, const AdamWParams& p,
                          const EmaParams& e, const double* grad_norm) override {
    check_adamw_tensors(tensors, "adamw_update_multi");
    typed(s, dt, "adamw_update_multi", [=](auto t) {
      using T = decltype(t);
      for (const AdamWTensor& a : tensors) {
        cpu::adamw_update<T>(a.n, io<T>(a.param), in<T>(a.grad), io<T>(a.exp_avg), io<T>(a.exp_avg_sq), io<T>(a.ema),
                             p, e, a.applied, grad_norm);
      }
    });
  }
  // ---- gradient clipping and vocabulary-parallel cross-entropy ----
  void clip_coefficient(const Stream& s, std::int64_t parts, const double* sq_sums, double max_norm, double* norm,
                        double* coefficient) override {
    Launch::run(s, [=] { cpu::clip_coefficient_of_squares(parts, sq_sums, max_norm, norm, coefficient); });
  }
  void scale_by_coefficient(const Stream& s, DType dt, std::int64_t n, void* x, const double* coefficient) override {
    typed(s, dt, "scale_by_coefficient", [=](auto t) {
      using T = decltype(t);
      cpu::scale_by_coefficient<T>(n, io<T>(x), *coefficient);
    });
  }
  void count_targets(const Stream& s, const char* what, std::int64_t rows, std::int64_t vocab,
                     const std::int64_t* targets, std::int64_t ignore_index, std::int64_t* count) override {
    Launch::run(s, [=] { *count = cpu::checked_target_count(what, rows, vocab, targets, ignore_index); });
  }
  void vocab_parallel_row_max(const Stream& s, DType dt, std::int64_t rows, std::int64_t k, std::int64_t own,
                              const void* x, double* max) override {
    typed(s, dt, "vocab_parallel_cross_entropy", [=](auto t) {
      using T = decltype(t);
      cpu::vocab_parallel_row_max<T>(rows, k, own, in<T>(x), max);
    });
  }
  void vocab_parallel_partials(const Stream& s, DType dt, std::int64_t rows, std::int64_t k, std::int64_t own,
                               std::int64_t start, const void* x, const double* max, const std::int64_t* targets,
                               std::int64_t ignore_index, double* sums) override {
    typed(s, dt, "vocab_parallel_cross_entropy", [=](auto t) {
      using T = decltype(t);
      cpu::vocab_parallel_partials<T>(rows, k, own, start, in<T>(x), max, targets, ignore_index, sums);
    });
  }
  void vocab_parallel_loss(const Stream& s, std::int64_t rows, const double* max, const double* sums,
                           const std::int64_t* targets, std::int64_t ignore_index, const std::int64_t* count,
                           double* lse, double* loss) override {
    Launch::run(s, [=] { cpu::vocab_parallel_loss(rows, max, sums, targets, ignore_index, count, lse, loss); });
  }
  void vocab_parallel_backward(const Stream& s, DType dt, std::int64_t rows, std::int64_t k, std::int64_t own,
                               std::int64_t start, const void* x, const std::int64_t* targets,
                               std::int64_t ignore_index, const double* lse, const void* grad_loss,
                               const std::int64_t* count, void* dx) override {
    typed(s, dt, "vocab_parallel_cross_entropy_backward", [=](auto t) {
      using T = decltype(t);
      const double g = double(*in<T>(grad_loss));
      const double grad_scale = count == nullptr ? g : *count > 0 ? g / double(*count) : 0.0;
      cpu::vocab_parallel_backward<T>(rows, k, own, start, in<T>(x), targets, ignore_index, lse, grad_scale,
                                      io<T>(dx));
    });
  }
  void vocab_parallel_local_ids(const Stream& s, const char* what, std::int64_t n, std::int64_t vocab,
                                std::int64_t start, std::int64_t rows, const std::int64_t* ids, std::int64_t* local,
                                double* mask) override {
    Launch::run(s, [=] { cpu::vocab_parallel_local_ids(what, n, vocab, start, rows, ids, local, mask); });
  }
  void replica_spread(const Stream& s, std::int64_t n, const std::vector<std::int64_t>& ends, const double* extremes,
                      const double* own, double* out) override {
    Launch::run(s, [=] { cpu::replica_spread(n, ends, extremes, own, out); });
  }
  // The GEMM library (kernels/cpu/gemm.h): a process-wide decision, shared by both host backends.
  int replicated_choice(std::string& reason) override {
    GemmChoice choice = gemm_choice();
    reason = std::move(choice.reason);
    return static_cast<int>(choice.backend);
  }
  void adopt_replicated_choice(int code, const std::string& reason) override {
    WF_CHECK(code >= static_cast<int>(GemmBackend::cblas) && code <= static_cast<int>(GemmBackend::onednn),
             "adopt_replicated_choice: {} is not a GEMM backend code", code);
    set_gemm_choice({static_cast<GemmBackend>(code), reason});
  }

 private:
  template <class T>
  static const T* in(const void* p) {
    return static_cast<const T*>(p);
  }
  template <class T>
  static T* io(void* p) {
    return static_cast<T*>(p);
  }
  // Checks the dtype on the host (an error names the kernel), then runs body(T{}) as a kernel.
  template <class Body>
  static void typed(const Stream& s, DType dt, const char* what, Body body) {
    WF_CHECK(dt == DType::f32 || dt == DType::f64, "{}: the {} kernels take f32 or f64 data, not {}", what,
             s.device().str(), dtype_name(dt));
    if (dt == DType::f32) {
      Launch::run(s, [body] { body(float{}); });
    } else {
      Launch::run(s, [body] { body(double{}); });
    }
  }

  const char* name_;
};

}  // namespace wf::kernels::cpu
