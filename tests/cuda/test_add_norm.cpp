// The CUDA residual add fused into LayerNorm / RMSNorm (add_layernorm_forward... in kernels/cuda/norm.cpp)
// against the CPU entries on the same fresh inputs: the sum bit for bit (one add in T on both
// sides), y, mean, rstd, dsum and the parameter gradients within tests/cuda/test_norm.cpp's
// tolerances (the same row kernels underneath); dsum with and without an incoming gradient. The
// CPU's fused entries are bitwise its unfused ones (tests/kernels/test_add_norm.cpp).
#include <cmath>
#include <cstdint>

#include "tests/cuda/entry_pairs.h"

using namespace wf;
using namespace wf::cuda_test;

namespace {

struct RowsCols {
  std::int64_t rows, cols;
};
// 1 and many rows, rows past the parameter gradients' 256 row chunks, widths of 1, 33, 1000 and
// a model's 1600, empty extents.
const RowsCols kShapes[] = {{1, 1}, {7, 33}, {3, 1000}, {300, 64}, {513, 1600}, {0, 5}, {4, 0}};

double sqrt_rows(std::int64_t rows) { return std::sqrt(static_cast<double>(rows > 1 ? rows : 1)); }

}  // namespace

TEMPLATE_TEST_CASE("cuda: the residual add fused into LayerNorm and RMSNorm matches the CPU's", "[cuda][norm]", float,
                   double) {
  using T = TestType;
  constexpr DType dt = kDType<T>;
  constexpr double kEps = 1e-5;
  std::uint64_t salt = 5000;
  for (const RowsCols& s : kShapes) {
    for (bool rms : {false, true}) {
      for (bool with_dsum_in : {true, false}) {
        INFO("[rows, cols] = [" << s.rows << ", " << s.cols << "], " << (rms ? "RMSNorm" : "LayerNorm")
                                << (with_dsum_in ? " with" : " without") << " an incoming sum gradient");
        Pair x = random_pair<T>({s.rows, s.cols}, ++salt), branch = random_pair<T>({s.rows, s.cols}, ++salt);
        Pair weight = random_pair<T>({s.cols}, ++salt), bias = random_pair<T>({s.cols}, ++salt);
        Pair sum = output_pair({s.rows, s.cols}, dt), y = output_pair({s.rows, s.cols}, dt);
        Pair mean = output_pair({s.rows}, dt), rstd = output_pair({s.rows}, dt);
        if (rms) {
          cpu_kernels().add_rmsnorm_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), branch.c(), weight.c(), kEps,
                                            sum.c(), y.c(), rstd.c());
          gpu_kernels().add_rmsnorm_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), branch.g(), weight.g(), kEps,
                                            sum.g(), y.g(), rstd.g());
        } else {
          cpu_kernels().add_layernorm_forward(cpu_stream(), dt, s.rows, s.cols, x.c(), branch.c(), weight.c(),
                                              bias.c(), kEps, sum.c(), y.c(), mean.c(), rstd.c());
          gpu_kernels().add_layernorm_forward(gpu_stream(), dt, s.rows, s.cols, x.g(), branch.g(), weight.g(),
                                              bias.g(), kEps, sum.g(), y.g(), mean.g(), rstd.g());
          require_close(mean.gpu, mean.cpu, kRtol<T>, kAtol<T>, "mean");
        }
        require_same_bits(sum.gpu, sum.cpu, "sum");
        require_close(rstd.gpu, rstd.cpu, kRtol<T>, kAtol<T>, "rstd");
        require_close(y.gpu, y.cpu, kRtol<T>, kAtol<T>, "y");

        // The backward from the CPU's sum and statistics on both sides; the parameter gradients
        // start from random values (they accumulate).
        Pair saved_sum = on_both(sum.cpu), saved_mean = on_both(mean.cpu), saved_rstd = on_both(rstd.cpu);
        Pair dy = random_pair<T>({s.rows, s.cols}, ++salt), dsum_in = random_pair<T>({s.rows, s.cols}, ++salt);
        Pair dsum = output_pair({s.rows, s.cols}, dt);
        Pair dweight = random_pair<T>({s.cols}, ++salt), dbias = random_pair<T>({s.cols}, ++salt);
        auto backward = [&](kernels::Backend& k, const Stream& stream, bool on_gpu) {
          auto p = [on_gpu](Pair& q) { return on_gpu ? q.g() : q.c(); };
          const void* din = with_dsum_in ? p(dsum_in) : nullptr;
          if (rms) {
            k.add_rmsnorm_backward(stream, dt, s.rows, s.cols, p(saved_sum), p(weight), p(saved_rstd), p(dy), din,
                                   p(dsum), p(dweight));
          } else {
            k.add_layernorm_backward(stream, dt, s.rows, s.cols, p(saved_sum), p(weight), p(saved_mean),
                                     p(saved_rstd), p(dy), din, p(dsum), p(dweight), p(dbias));
          }
        };
        backward(cpu_kernels(), cpu_stream(), false);
        backward(gpu_kernels(), gpu_stream(), true);
        require_close(dsum.gpu, dsum.cpu, kRtol<T>, kAtol<T>, "dsum");
        require_close(dweight.gpu, dweight.cpu, kRtol<T>, kAtol<T> * sqrt_rows(s.rows), "dweight");
        if (!rms) require_close(dbias.gpu, dbias.cpu, kRtol<T>, kAtol<T> * sqrt_rows(s.rows), "dbias");
      }
    }
  }
}
