// The CUDA entries of softmax, log-softmax, LayerNorm and RMSNorm (kernels/cuda/cuda_kernels.h):
// the CPU entries' argument checks, then the launchers of kernels/cuda/norm.cu.
#include <optional>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/norm.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cuda {
namespace {

void check_sizes(const char* what, std::int64_t rows, std::int64_t cols, double eps = 0.0) {
  WF_CHECK(rows >= 0 && cols >= 0, "{}: sizes must be non-negative, got rows={} cols={}", what, rows, cols);
  WF_CHECK(eps >= 0.0, "{}: eps must be >= 0, got {}", what, eps);
}


// The fused residual add's operands: without them the entry would be the plain norm and leave sum
// unwritten (empty arrays may have no storage).
void check_residual(const char* what, std::int64_t rows, std::int64_t cols, const void* branch, const void* sum) {
  WF_CHECK(rows * cols == 0 || (branch != nullptr && sum != nullptr),
           "{}: branch and sum are required (the norm without a residual add is the plain entry)", what);
}

// The backward of either norm: the parameter gradients first (their own passes over x and dy),
// then dx, so a dx that shares dy's memory is written only after every read of dy. dsum_in
// (nullable; the fused residual add) is added onto dx.
void norm_backward(const Stream& stream, DType dtype, const char* what, bool rms, std::int64_t rows,
                   std::int64_t cols, const void* x, const void* weight, const void* mean, const void* rstd,
                   const void* dy, const void* dsum_in, void* dx, void* dweight, void* dbias) {
  check_sizes(what, rows, cols);
  const std::int64_t chunks = norm_param_chunks(rows);
  std::optional<detail::CudaScratch> partials;  // none when there is nothing to sum
  if ((dweight != nullptr || dbias != nullptr) && rows > 0 && cols > 0) {
    partials.emplace(stream, static_cast<std::size_t>(norm_param_partials_size(cols, chunks)) * sizeof(double));
  }
  dispatch_floating(dtype, what, [&](auto t) {
    using T = decltype(t);
    const cudaStream_t s = native(stream);
    if (partials) {
      launch_norm_param_grads<T>(s, rms, rows, cols, chunks, in<T>(x), in<T>(mean), in<T>(rstd), in<T>(dy),
                                 io<T>(dweight), io<T>(dbias), partials->as<double>());
    }
    launch_norm_backward_dx<T>(s, rms, rows, cols, in<T>(x), in<T>(weight), in<T>(mean), in<T>(rstd), in<T>(dy),
                               in<T>(dsum_in), io<T>(dx));
  });
}

}  // namespace

void CudaKernels::softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                  const void* x, void* y) {
  check_sizes("softmax_forward", rows, cols);
  dispatch_floating(dtype, "softmax_forward", [&](auto t) {
    using T = decltype(t);
    launch_softmax_forward<T>(native(stream), rows, cols, in<T>(x), io<T>(y));
  });
}

void CudaKernels::log_softmax_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                      const void* x, void* y) {
  check_sizes("log_softmax_forward", rows, cols);
  dispatch_floating(dtype, "log_softmax_forward", [&](auto t) {
    using T = decltype(t);
    launch_log_softmax_forward<T>(native(stream), rows, cols, in<T>(x), io<T>(y));
  });
}

void CudaKernels::softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                   const void* y, const void* dy, void* dx) {
  check_sizes("softmax_backward", rows, cols);
  dispatch_floating(dtype, "softmax_backward", [&](auto t) {
    using T = decltype(t);
    launch_softmax_backward<T>(native(stream), rows, cols, in<T>(y), in<T>(dy), io<T>(dx));
  });
}

void CudaKernels::log_softmax_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                       const void* y, const void* dy, void* dx) {
  check_sizes("log_softmax_backward", rows, cols);
  dispatch_floating(dtype, "log_softmax_backward", [&](auto t) {
    using T = decltype(t);
    launch_log_softmax_backward<T>(native(stream), rows, cols, in<T>(y), in<T>(dy), io<T>(dx));
  });
}

void CudaKernels::layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                    const void* x, const void* weight, const void* bias, double eps, void* y,
                                    void* mean, void* rstd) {
  check_sizes("layernorm_forward", rows, cols, eps);
  dispatch_floating(dtype, "layernorm_forward", [&](auto t) {
    using T = decltype(t);
    launch_norm_forward<T>(native(stream), false, rows, cols, in<T>(x), nullptr, in<T>(weight), in<T>(bias), eps,
                           nullptr, io<T>(y), io<T>(mean), io<T>(rstd));
  });
}

void CudaKernels::layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                     const void* x, const void* weight, const void* mean, const void* rstd,
                                     const void* dy, void* dx, void* dweight, void* dbias) {
  norm_backward(stream, dtype, "layernorm_backward", false, rows, cols, x, weight, mean, rstd, dy, nullptr, dx,
                dweight, dbias);
}

void CudaKernels::rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                  const void* x, const void* weight, double eps, void* y, void* rstd) {
  check_sizes("rmsnorm_forward", rows, cols, eps);
  dispatch_floating(dtype, "rmsnorm_forward", [&](auto t) {
    using T = decltype(t);
    launch_norm_forward<T>(native(stream), true, rows, cols, in<T>(x), nullptr, in<T>(weight), nullptr, eps, nullptr,
                           io<T>(y), nullptr, io<T>(rstd));
  });
}

void CudaKernels::rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                   const void* x, const void* weight, const void* rstd, const void* dy, void* dx,
                                   void* dweight) {
  norm_backward(stream, dtype, "rmsnorm_backward", true, rows, cols, x, weight, nullptr, rstd, dy, nullptr, dx,
                dweight, nullptr);
}

void CudaKernels::add_layernorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                        const void* x, const void* branch, const void* weight, const void* bias,
                                        double eps, void* sum, void* y, void* mean, void* rstd) {
  check_sizes("add_layernorm_forward", rows, cols, eps);
  check_residual("add_layernorm_forward", rows, cols, branch, sum);
  dispatch_floating(dtype, "add_layernorm_forward", [&](auto t) {
    using T = decltype(t);
    launch_norm_forward<T>(native(stream), false, rows, cols, in<T>(x), in<T>(branch), in<T>(weight), in<T>(bias),
                           eps, io<T>(sum), io<T>(y), io<T>(mean), io<T>(rstd));
  });
}

void CudaKernels::add_layernorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                         const void* sum, const void* weight, const void* mean, const void* rstd,
                                         const void* dy, const void* dsum_in, void* dsum, void* dweight,
                                         void* dbias) {
  norm_backward(stream, dtype, "add_layernorm_backward", false, rows, cols, sum, weight, mean, rstd, dy, dsum_in,
                dsum, dweight, dbias);
}

void CudaKernels::add_rmsnorm_forward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                      const void* x, const void* branch, const void* weight, double eps, void* sum,
                                      void* y, void* rstd) {
  check_sizes("add_rmsnorm_forward", rows, cols, eps);
  check_residual("add_rmsnorm_forward", rows, cols, branch, sum);
  dispatch_floating(dtype, "add_rmsnorm_forward", [&](auto t) {
    using T = decltype(t);
    launch_norm_forward<T>(native(stream), true, rows, cols, in<T>(x), in<T>(branch), in<T>(weight), nullptr, eps,
                           io<T>(sum), io<T>(y), nullptr, io<T>(rstd));
  });
}

void CudaKernels::add_rmsnorm_backward(const Stream& stream, DType dtype, std::int64_t rows, std::int64_t cols,
                                       const void* sum, const void* weight, const void* rstd, const void* dy,
                                       const void* dsum_in, void* dsum, void* dweight) {
  norm_backward(stream, dtype, "add_rmsnorm_backward", true, rows, cols, sum, weight, nullptr, rstd, dy, dsum_in,
                dsum, dweight, nullptr);
}

}  // namespace wf::kernels::cuda
