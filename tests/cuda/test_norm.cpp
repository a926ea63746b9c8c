// The CUDA softmax, log-softmax, LayerNorm and RMSNorm entries (kernels/cuda/norm.cpp) against the
// CPU entries on the same fresh inputs, forward and backward (dx, dweight, dbias: the CPU entries'
// gradients are checked against finite differences in tests/kernels). Tolerances kRtol/kAtol
// (tests/cuda/entry_pairs.h): both sides sum rows in double, so only the order of the additions,
// the T exponentials (libm vs CUDA, a few ulp) and FMA contraction differ; the parameter gradients'
// absolute floor grows with sqrt(rows) as their summation rounding does. Masked (−inf) entries and
// all −inf rows give exactly the CPU's 0 and −inf. A repeated backward gives the same bits.
#include <cmath>
#include <cstdint>
#include <limits>

#include "tests/cuda/entry_pairs.h"

using namespace wf;
using namespace wf::cuda_test;

namespace {

struct RowsCols {
  std::int64_t rows, cols;
};
// Rows of 1, 33, 1000 and 50257 (a vocabulary) columns; 1 and many rows; rows past the parameter
// gradients' 256 row chunks; empty extents.
const RowsCols kShapes[] = {{1, 1},    {7, 33},    {3, 1000}, {2, 50257}, {300, 64},
                            {1000, 1}, {513, 1600}, {0, 5},   {4, 0}};

// Softmax inputs: N(0, 9) logits, every 7th entry masked to −inf, and row 1 (when there is one)
// masked entirely.
template <class T>
Pair logits(const RowsCols& s, std::uint64_t salt) {
  Tensor x = random_normal({s.rows, s.cols}, fresh_seed(salt), DType::f64);
  double* p = x.data<double>();
  for (std::int64_t k = 0; k < x.numel(); ++k) {
    const std::int64_t r = k / s.cols;
    p[k] = (k % 7 == 3 || r == 1) ? -std::numeric_limits<double>::infinity() : 3.0 * p[k];
  }
  return on_both(x.to(kDType<T>));
}

template <class T>
Pair scaled_pair(const Shape& shape, std::uint64_t salt, double scale, double shift) {
  Tensor x = random_normal(shape, fresh_seed(salt), DType::f64);
  double* p = x.data<double>();
  for (std::int64_t k = 0; k < x.numel(); ++k) p[k] = scale * p[k] + shift;
  return on_both(x.to(kDType<T>));
}

double sqrt_rows(std::int64_t rows) { return std::sqrt(static_cast<double>(rows > 1 ? rows : 1)); }

}  // namespace

TEMPLATE_TEST_CASE("cuda: softmax and log-softmax forward and backward match the CPU's", "[cuda][norm]", float,
                   double) {
  using T = TestType;
  constexpr DType dt = kDType<T>;
  std::uint64_t salt = 1000;
  for (const RowsCols& s : kShapes) {
    INFO("[rows, cols] = [" << s.rows << ", " << s.cols << "]");
    Pair x = logits<T>(s, ++salt);
    Pair dy = random_pair<T>({s.rows, s.cols}, ++salt);
    for (bool logarithmic : {false, true}) {
      INFO((logarithmic ? "log_softmax" : "softmax"));
      Pair y = output_pair({s.rows, s.cols}, dt);
      if (logarithmic) {
        cpu_kernels().log_softmax_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), y.c());
        gpu_kernels().log_softmax_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), y.g());
      } else {
        cpu_kernels().softmax_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), y.c());
        gpu_kernels().softmax_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), y.g());
      }
      require_close(y.gpu, y.cpu, kRtol<T>, kAtol<T>, "forward");

      // The backward from the CPU's forward output on both sides.
      Pair y_saved = on_both(y.cpu);
      Pair dx = output_pair({s.rows, s.cols}, dt);
      auto backward = [&](kernels::Backend& k, const Stream& stream, const void* yp, const void* dyp, void* dxp) {
        if (logarithmic) {
          k.log_softmax_backward(stream, dt, s.rows, s.cols, yp, dyp, dxp);
        } else {
          k.softmax_backward(stream, dt, s.rows, s.cols, yp, dyp, dxp);
        }
      };
      backward(cpu_kernels(), cpu_stream(), y_saved.c(), dy.c(), dx.c());
      backward(gpu_kernels(), gpu_stream(), y_saved.g(), dy.g(), dx.g());
      require_close(dx.gpu, dx.cpu, kRtol<T>, kAtol<T>, "backward");
      Tensor again = Tensor::full({s.rows, s.cols}, -7.0, dt, gpu());
      backward(gpu_kernels(), gpu_stream(), y_saved.g(), dy.g(), again.raw_data());
      require_same_bits(again, dx.gpu, "a second backward");
    }
  }
}

TEMPLATE_TEST_CASE("cuda: softmax of a NaN or +inf row is the CPU's", "[cuda][norm]", float, double) {
  using T = TestType;
  constexpr DType dt = kDType<T>;
  Tensor x = random_normal({3, 40}, fresh_seed(1100), dt);
  x.set(5, std::numeric_limits<double>::quiet_NaN());
  x.set(40 + 7, std::numeric_limits<double>::infinity());
  Pair in = on_both(x);
  for (bool logarithmic : {false, true}) {
    Pair y = output_pair({3, 40}, dt);
    if (logarithmic) {
      cpu_kernels().log_softmax_forward(cpu_stream(), dt, 3, 40, in.c(), y.c());
      gpu_kernels().log_softmax_forward(gpu_stream(), dt, 3, 40, in.g(), y.g());
    } else {
      cpu_kernels().softmax_forward(cpu_stream(), dt, 3, 40, in.c(), y.c());
      gpu_kernels().softmax_forward(gpu_stream(), dt, 3, 40, in.g(), y.g());
    }
    require_close(y.gpu, y.cpu, kRtol<T>, kAtol<T>, logarithmic ? "log_softmax" : "softmax");
  }
}

TEMPLATE_TEST_CASE("cuda: LayerNorm and RMSNorm forward and backward match the CPU's", "[cuda][norm]", float,
                   double) {
  using T = TestType;
  constexpr DType dt = kDType<T>;
  constexpr double kEps = 1e-5;
  std::uint64_t salt = 2000;
  for (const RowsCols& s : kShapes) {
    for (bool rms : {false, true}) {
      for (bool affine : {true, false}) {
        INFO("[rows, cols] = [" << s.rows << ", " << s.cols << "], " << (rms ? "RMSNorm" : "LayerNorm")
                                << (affine ? " with" : " without") << " weight and bias");
        Pair x = scaled_pair<T>({s.rows, s.cols}, ++salt, 2.0, 0.5);  // a mean far from 0
        Pair weight = scaled_pair<T>({s.cols}, ++salt, 0.5, 1.0);
        Pair bias = random_pair<T>({s.cols}, ++salt);
        const void* wc = affine ? weight.c() : nullptr;
        const void* wg = affine ? weight.g() : nullptr;
        const void* bc = affine && !rms ? bias.c() : nullptr;
        const void* bg = affine && !rms ? bias.g() : nullptr;
        Pair y = output_pair({s.rows, s.cols}, dt);
        Pair mean = output_pair({s.rows}, dt), rstd = output_pair({s.rows}, dt);
        if (rms) {
          cpu_kernels().rmsnorm_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), wc, kEps, y.c(), rstd.c());
          gpu_kernels().rmsnorm_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), wg, kEps, y.g(), rstd.g());
        } else {
          cpu_kernels().layernorm_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), wc, bc, kEps, y.c(), mean.c(),
                                          rstd.c());
          gpu_kernels().layernorm_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), wg, bg, kEps, y.g(), mean.g(),
                                          rstd.g());
          require_close(mean.gpu, mean.cpu, kRtol<T>, kAtol<T>, "mean");
        }
        require_close(rstd.gpu, rstd.cpu, kRtol<T>, kAtol<T>, "rstd");
        require_close(y.gpu, y.cpu, kRtol<T>, kAtol<T>, "y");

        // The backward from the CPU's saved statistics on both sides; the parameter gradients start
        // from random values (they accumulate) and are left out (null) when there is no weight.
        Pair saved_mean = on_both(mean.cpu), saved_rstd = on_both(rstd.cpu);
        Pair dy = random_pair<T>({s.rows, s.cols}, ++salt);
        Pair dx = output_pair({s.rows, s.cols}, dt);
        Pair dweight = random_pair<T>({s.cols}, ++salt), dbias = random_pair<T>({s.cols}, ++salt);
        const Tensor dweight_start = dweight.gpu.clone(), dbias_start = dbias.gpu.clone();
        auto backward = [&](kernels::Backend& k, const Stream& stream, Pair& xs, const void* w, Pair& m, Pair& r,
                            Pair& d, void* dxp, void* dwp, void* dbp, bool on_gpu) {
          auto p = [on_gpu](Pair& q) { return on_gpu ? q.g() : q.c(); };
          if (rms) {
            k.rmsnorm_backward(stream, dt, s.rows, s.cols, p(xs), w, p(r), p(d), dxp, dwp);
          } else {
            k.layernorm_backward(stream, dt, s.rows, s.cols, p(xs), w, p(m), p(r), p(d), dxp, dwp, dbp);
          }
        };
        backward(cpu_kernels(), cpu_stream(), x, wc, saved_mean, saved_rstd, dy, dx.c(),
                 affine ? dweight.c() : nullptr, affine ? dbias.c() : nullptr, false);
        backward(gpu_kernels(), gpu_stream(), x, wg, saved_mean, saved_rstd, dy, dx.g(),
                 affine ? dweight.g() : nullptr, affine ? dbias.g() : nullptr, true);
        require_close(dx.gpu, dx.cpu, kRtol<T>, kAtol<T>, "dx");
        if (!affine) continue;
        require_close(dweight.gpu, dweight.cpu, kRtol<T>, kAtol<T> * sqrt_rows(s.rows), "dweight");
        if (!rms) require_close(dbias.gpu, dbias.cpu, kRtol<T>, kAtol<T> * sqrt_rows(s.rows), "dbias");

        Tensor dx_again = Tensor::full({s.rows, s.cols}, -7.0, dt, gpu());
        Tensor dweight_again = dweight_start.clone(), dbias_again = dbias_start.clone();
        backward(gpu_kernels(), gpu_stream(), x, wg, saved_mean, saved_rstd, dy, dx_again.raw_data(),
                 dweight_again.raw_data(), dbias_again.raw_data(), true);
        require_same_bits(dx_again, dx.gpu, "a second dx");
        require_same_bits(dweight_again, dweight.gpu, "a second dweight");
        if (!rms) require_same_bits(dbias_again, dbias.gpu, "a second dbias");
      }
    }
  }
  Pair x = random_pair<T>({2, 3}, 2999);
  Pair y = output_pair({2, 3}, dt);
  CHECK_THROWS_WITH(gpu_kernels().layernorm_forward(gpu_stream(), dt, 2, 3, x.g(), nullptr, nullptr, -1.0, y.g(),
                                                    nullptr, nullptr),
                    Catch::Contains("eps must be >= 0"));
}
