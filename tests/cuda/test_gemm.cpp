// The cuBLASLt GEMMs (kernels/cuda/gemm.cpp) against the CPU's (kernels/cpu/gemm.h) on the same
// fresh random operands: every transpose pair, odd sizes, alpha/beta (beta 0 over NaN), padded
// leading dimensions, strided batches with broadcast operands, bf16 operands, linear_forward,
// linear_gelu_forward (the GELU epilogue and its fallback), linear_add_forward (the residual as C).
//
// Tolerance. Both devices round a dot product of K terms differently (blocking, FMA, order), and
// each is within γ_K·Σ|a||b| of the exact value (γ_K ≈ K·u in the worst case), so the
// comparison is per element relative to bound = |alpha|·Σ_k |a||b| + |beta|·|c| (computed in
// f64), never to |C| itself, which cancellation can make arbitrarily small:
//   - f32: 1e-5·bound. Random-sign rounding errors grow like √K·u, not K·u: for K ≤ 1000 the
//     expected difference is ~1e-7·bound (u = 6e-8), so 1e-5 is a wide margin, while TF32
//     (u = 4.9e-4) or a wrong element fails it by orders of magnitude.
//   - f64: 1e-12·bound (u = 1.1e-16).
//   - bf16 operands: the products of two bf16 (8-bit significands) are exact in f32 and both
//     devices accumulate in f32, so the only difference is f32 accumulation order: 1e-5·bound,
//     against the CPU's own bf16 product (oneDNN or the widened f32 one), not an f64 reference.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cuda/gemm.h"
#include "tests/cuda/cuda_test_util.h"

namespace wf::cuda_test {
namespace {

constexpr double kRtolF32 = 1e-5, kRtolF64 = 1e-12;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A copy on the CPU in f64 with every element replaced by its absolute value (NaN stays NaN).
Tensor abs_f64(const Tensor& t) {
  Tensor a = t.to(Device::cpu()).to(DType::f64).clone();
  double* p = a.data<double>();
  for (std::int64_t i = 0; i < a.numel(); ++i) p[i] = std::abs(p[i]);
  return a;
}

// REQUIREs |got − want| <= rtol·bound elementwise (all of the buffers, padding included), NaN
// exactly where `want` has it; the message names `what` and the worst element.
void require_within(const Tensor& got, const Tensor& want, const Tensor& bound, double rtol, const std::string& what) {
  const Tensor g = got.to(Device::cpu()).to(DType::f64), w = want.to(Device::cpu()).to(DType::f64);
  INFO(what);
  REQUIRE(g.numel() == w.numel());
  REQUIRE(bound.numel() == w.numel());
  const double *gp = g.data<double>(), *wp = w.data<double>(), *bp = bound.data<double>();
  std::int64_t worst = -1;
  double worst_excess = 0;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (std::isnan(wp[i]) || std::isnan(gp[i])) {
      INFO("element " << i << ": got " << gp[i] << ", want " << wp[i]);
      REQUIRE(std::isnan(wp[i]) == std::isnan(gp[i]));
      continue;
    }
    const double excess = std::abs(gp[i] - wp[i]) - rtol * bp[i];
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst >= 0) {
    INFO("worst element " << worst << " of " << g.numel() << ": got " << gp[worst] << ", want " << wp[worst]
                          << ", bound " << bp[worst] << " (rtol " << rtol << ")");
    REQUIRE(worst < 0);
  }
}

// One product's geometry: op(A) [M, K], op(B) [K, N], C [M, N], each stored with `pad` extra
// columns (ld = columns + pad).
struct GemmCase {
  bool ta, tb;
  std::int64_t M, N, K, pad;
  double alpha, beta;
  bool nan_c;  // C holds NaN on entry (with beta 0: it must not leak)

  std::int64_t a_rows() const { return ta ? K : M; }
  std::int64_t a_cols() const { return ta ? M : K; }
  std::int64_t b_rows() const { return tb ? N : K; }
  std::int64_t b_cols() const { return tb ? K : N; }
  std::int64_t lda() const { return a_cols() + pad; }
  std::int64_t ldb() const { return b_cols() + pad; }
  std::int64_t ldc() const { return N + pad; }
  std::string str() const {
    return "trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) + " M=" + std::to_string(M) +
           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " pad=" + std::to_string(pad) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) + (nan_c ? " C=NaN" : "");
  }
};

Tensor initial_c(const GemmCase& c, std::uint64_t seed, DType dtype) {
  if (c.nan_c) return Tensor::full({c.M, c.ldc()}, kNaN, dtype);
  return random_normal({c.M, c.ldc()}, seed, dtype);
}

// The bound of the header comment: |alpha|·|op(A)|·|op(B)| + |beta|·|C| in f64 on the CPU.
Tensor product_bound(const GemmCase& c, const Tensor& A, const Tensor& B, const Tensor& C) {
  const Tensor a = abs_f64(A), b = abs_f64(B);
  Tensor bound = abs_f64(C);
  cpu_kernels().gemm(cpu_stream(), DType::f64, c.ta, c.tb, c.M, c.N, c.K, std::abs(c.alpha), a.raw_data(), c.lda(),
                     b.raw_data(), c.ldb(), std::abs(c.beta), bound.raw_data(), c.ldc());
  return bound;
}

// gemm (f32, f64) or gemm_bf16 (dtype bf16: bf16 operands, f32 C) on both devices.
void check_gemm(DType dtype, const GemmCase& c, std::uint64_t seed) {
  const DType c_dtype = dtype == DType::bf16 ? DType::f32 : dtype;
  const Tensor A = random_normal({c.a_rows(), c.lda()}, seed, dtype);
  const Tensor B = random_normal({c.b_rows(), c.ldb()}, seed + 1, dtype);
  const Tensor C = initial_c(c, seed + 2, c_dtype);
  Tensor want = C.clone();
  const Tensor gA = A.to(gpu()), gB = B.to(gpu());
  Tensor got = C.to(gpu());
  if (dtype == DType::bf16) {
    const auto call = [&](kernels::Backend& k, const Stream& s, const Tensor& a, const Tensor& b, Tensor& out) {
      k.gemm_bf16(s, c.ta, c.tb, c.M, c.N, c.K, static_cast<float>(c.alpha), a.data<bf16>(), c.lda(), b.data<bf16>(),
                  c.ldb(), static_cast<float>(c.beta), out.data<float>(), c.ldc());
    };
    call(cpu_kernels(), cpu_stream(), A, B, want);
    call(gpu_kernels(), gpu_stream(), gA, gB, got);
  } else {
    const auto call = [&](kernels::Backend& k, const Stream& s, const Tensor& a, const Tensor& b, Tensor& out) {
      k.gemm(s, dtype, c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.raw_data(), c.lda(), b.raw_data(), c.ldb(), c.beta,
             out.raw_data(), c.ldc());
    };
    call(cpu_kernels(), cpu_stream(), A, B, want);
    call(gpu_kernels(), gpu_stream(), gA, gB, got);
  }
  const double rtol = dtype == DType::f64 ? kRtolF64 : kRtolF32;
  require_within(got, want, product_bound(c, A, B, C), rtol, std::string(dtype_name(dtype)) + " " + c.str());
}

// Every transpose pair over sizes drawn from {1, 7, 33, 129, 1000}, cycling through alpha/beta
// (beta 0 over NaN among them) and padded leading dimensions.
void check_every_shape(DType dtype, std::uint64_t salt) {
  struct Size {
    std::int64_t M, N, K;
  };
  const Size sizes[] = {{1, 1, 1},     {7, 33, 129},  {33, 129, 7},  {129, 7, 33},    {1000, 33, 7},
                        {7, 1000, 33}, {33, 7, 1000}, {129, 129, 129}, {1, 1000, 129}, {1000, 1, 33}};
  struct Scalars {
    double alpha, beta;
    bool nan_c;
  };
  const Scalars scalars[] = {{1.0, 0.0, false}, {0.75, -1.25, false}, {1.0, 0.0, true}, {-2.0, 1.0, false}};
  int i = 0;
  for (const Size& s : sizes) {
    for (int trans = 0; trans < 4; ++trans, ++i) {
      const Scalars& sc = scalars[i % 4];
      const GemmCase c{(trans & 1) != 0, (trans & 2) != 0, s.M, s.N, s.K, (i / 4) % 2 == 0 ? 0 : 5,
                       sc.alpha, sc.beta, sc.nan_c};
      check_gemm(dtype, c, fresh_seed(salt + 10 * static_cast<std::uint64_t>(i)));
    }
  }
}

// Sets TF32 for a scope and restores true f32 after it, whatever the test does.
struct Tf32Scope {
  explicit Tf32Scope(bool on) { kernels::cuda::set_cuda_tf32(on); }
  ~Tf32Scope() { kernels::cuda::set_cuda_tf32(false); }
};

}  // namespace

TEST_CASE("cuda gemm: f32 and f64 match the CPU for every transpose pair, odd sizes, alpha/beta and padded lds",
          "[cuda][gemm]") {
  const Tf32Scope f32(false);
  check_every_shape(DType::f32, 100);
  check_every_shape(DType::f64, 200);
}

TEST_CASE("cuda gemm: empty sizes, K = 0 and alpha = 0 scale C by beta as the CPU does (beta 0 overwrites NaN)",
          "[cuda][gemm]") {
  const GemmCase cases[] = {
      {false, false, 0, 7, 33, 0, 1.0, 0.0, false},  {true, false, 7, 0, 33, 0, 1.0, 0.0, false},
      {false, true, 33, 7, 0, 0, 1.0, 0.0, true},    {false, false, 33, 7, 0, 2, 1.0, 0.5, false},
      {true, true, 7, 33, 129, 3, 0.0, 2.0, false},  {false, false, 129, 7, 33, 0, 0.0, 0.0, true},
  };
  std::uint64_t salt = 300;
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const GemmCase& c : cases) check_gemm(dtype, c, fresh_seed(++salt));
  }
}

TEST_CASE("cuda gemm_bf16: bf16 operands with f32 accumulation match the CPU's bf16 product", "[cuda][gemm]") {
  check_every_shape(DType::bf16, 400);
}

TEST_CASE("cuda gemm_batched: strided batches, broadcast operands (stride 0) and gaps between matrices",
          "[cuda][gemm]") {
  const std::int64_t batch = 3;
  std::uint64_t salt = 500;
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (int trans = 0; trans < 4; ++trans) {
      for (int broadcast = 0; broadcast < 3; ++broadcast) {  // none, A shared, B shared
        const GemmCase c{(trans & 1) != 0, (trans & 2) != 0, 33, 7, 129, trans % 2 == 0 ? 0 : 3, 0.5, -1.0, false};
        const std::int64_t span_a = c.a_rows() * c.lda(), span_b = c.b_rows() * c.ldb(), span_c = c.M * c.ldc();
        const std::int64_t stride_a = broadcast == 1 ? 0 : span_a + 11, stride_b = broadcast == 2 ? 0 : span_b + 3;
        const std::int64_t stride_c = span_c + 5;
        const Tensor A = random_normal({(batch - 1) * stride_a + span_a}, fresh_seed(++salt), dtype);
        const Tensor B = random_normal({(batch - 1) * stride_b + span_b}, fresh_seed(++salt), dtype);
        const Tensor C = random_normal({(batch - 1) * stride_c + span_c}, fresh_seed(++salt), dtype);
        const auto run = [&](kernels::Backend& k, const Stream& s, const Tensor& a, const Tensor& b, Tensor& out,
                             DType dt, double alpha, double beta) {
          k.gemm_batched(s, dt, c.ta, c.tb, batch, c.M, c.N, c.K, alpha, a.raw_data(), c.lda(), stride_a,
                         b.raw_data(), c.ldb(), stride_b, beta, out.raw_data(), c.ldc(), stride_c);
        };
        Tensor want = C.clone(), bound = abs_f64(C);
        const Tensor gA = A.to(gpu()), gB = B.to(gpu());
        Tensor got = C.to(gpu());
        run(cpu_kernels(), cpu_stream(), A, B, want, dtype, c.alpha, c.beta);
        run(gpu_kernels(), gpu_stream(), gA, gB, got, dtype, c.alpha, c.beta);
        const Tensor absA = abs_f64(A), absB = abs_f64(B);
        run(cpu_kernels(), cpu_stream(), absA, absB, bound, DType::f64, std::abs(c.alpha), std::abs(c.beta));
        require_within(got, want, bound, dtype == DType::f64 ? kRtolF64 : kRtolF32,
                       std::string(dtype_name(dtype)) + " batched " + c.str() + " broadcast=" +
                           std::to_string(broadcast));
      }
    }
  }
}

// A linear's bound: |x|·|W|ᵀ (+ |bias| per row) in f64 on the CPU (bias undefined: none).
Tensor linear_bound(const Tensor& x, const Tensor& W, const Tensor& bias, std::int64_t rows, std::int64_t in,
                    std::int64_t out) {
  const Tensor ax = abs_f64(x), aW = abs_f64(W);
  Tensor bound = Tensor::zeros({rows, out}, DType::f64);
  cpu_kernels().gemm(cpu_stream(), DType::f64, false, true, rows, out, in, 1.0, ax.raw_data(), in, aW.raw_data(), in,
                     0.0, bound.raw_data(), out);
  if (bias.defined()) {
    const Tensor ab = abs_f64(bias);
    cpu_kernels().add_bias(cpu_stream(), DType::f64, rows, out, bound.raw_data(), ab.raw_data(), bound.raw_data());
  }
  return bound;
}

TEST_CASE("cuda linear_forward: x·Wᵀ with and without the bias epilogue matches the CPU's gemm then add_bias",
          "[cuda][gemm]") {
  struct Size {
    std::int64_t rows, in, out;
  };
  const Size sizes[] = {{1, 7, 1}, {33, 129, 7}, {1000, 33, 257}, {7, 1000, 33}, {129, 1, 129}};
  std::uint64_t salt = 600;
  for (const DType operands : {DType::f32, DType::f64, DType::bf16}) {
    const DType out_dtype = operands == DType::bf16 ? DType::f32 : operands;
    for (const Size& s : sizes) {
      for (const bool with_bias : {false, true}) {
        const Tensor x = random_normal({s.rows, s.in}, fresh_seed(++salt), operands);
        const Tensor W = random_normal({s.out, s.in}, fresh_seed(++salt), operands);
        const Tensor bias = random_normal({s.out}, fresh_seed(++salt), out_dtype);
        const Tensor y0 = Tensor::full({s.rows, s.out}, kNaN, out_dtype);  // overwritten, never read
        const auto run = [&](kernels::Backend& k, const Stream& st, const Tensor& xx, const Tensor& ww,
                             const Tensor& bb, Tensor& y) {
          k.linear_forward(st, operands, s.rows, s.in, s.out, xx.raw_data(), ww.raw_data(),
                           with_bias ? bb.raw_data() : nullptr, y.raw_data());
        };
        Tensor want = y0.clone();
        run(cpu_kernels(), cpu_stream(), x, W, bias, want);
        const Tensor gx = x.to(gpu()), gW = W.to(gpu()), gbias = bias.to(gpu());
        Tensor got = y0.to(gpu());
        run(gpu_kernels(), gpu_stream(), gx, gW, gbias, got);
        const Tensor bound = linear_bound(x, W, with_bias ? bias : Tensor(), s.rows, s.in, s.out);
        require_within(got, want, bound, operands == DType::f64 ? kRtolF64 : kRtolF32,
                       std::string(dtype_name(operands)) + " linear_forward rows=" + std::to_string(s.rows) +
                           " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out) +
                           (with_bias ? " with bias" : " without bias"));
      }
    }
  }
}

// The GELU epilogue (CUBLASLT_EPILOGUE_GELU_AUX[_BIAS]) against the CPU's default entry, the
// composition linear_forward then the tanh GELU kernel, on the same inputs. out_features a multiple
// of 8 takes the epilogue; 7, 129 and 1 take the fallback (the aux leading dimension rule), as
// does f64 wherever cuBLASLt has no f64 GELU epilogue. Tolerance, per element:
//   - pre (the product and bias): the products' rtol of the header comment times the bound, for
//     bf16 operands too (their products are exact in f32 and both sides accumulate in f32);
//   - y = gelu(pre): |gelu'| <= 1.13, so pre's difference moves y by at most 1.13 times it, plus
//     the two GELUs' own rounding (each a few ulp: rtol·|y|). The epilogue's GELU is the tanh
//     approximation (gemm.cpp says why we believe so); an erf GELU would differ by up to 1e-3 and
//     fail, and so would a GELU built on a hardware tanh approximation (tanh.approx, 2^-11 relative)
//     — that is what this case is for.
TEST_CASE("cuda linear_gelu_forward: the GELU epilogue and its fallback match the CPU's linear then GELU",
          "[cuda][gemm]") {
  struct Size {
    std::int64_t rows, in, out;
  };
  const Size sizes[] = {{1, 7, 8},    {33, 129, 16}, {1000, 33, 256}, {7, 1000, 64},  // the epilogue
                        {33, 65, 7},  {1000, 33, 129}, {5, 8, 1}};                     // out % 8 != 0
  std::uint64_t salt = 800;
  for (const DType operands : {DType::f32, DType::f64, DType::bf16}) {
    const DType out_dtype = operands == DType::bf16 ? DType::f32 : operands;
    const double rtol = operands == DType::f64 ? kRtolF64 : kRtolF32;
    for (const Size& s : sizes) {
      for (const bool with_bias : {false, true}) {
        const Tensor x = random_normal({s.rows, s.in}, fresh_seed(++salt), operands);
        const Tensor W = random_normal({s.out, s.in}, fresh_seed(++salt), operands);
        const Tensor bias = random_normal({s.out}, fresh_seed(++salt), out_dtype);
        const Tensor nan = Tensor::full({s.rows, s.out}, kNaN, out_dtype);  // both outputs overwritten, never read
        const auto run = [&](kernels::Backend& k, const Stream& st, const Tensor& xx, const Tensor& ww,
                             const Tensor& bb, Tensor& pre, Tensor& y) {
          k.linear_gelu_forward(st, operands, s.rows, s.in, s.out, xx.raw_data(), ww.raw_data(),
                                with_bias ? bb.raw_data() : nullptr, pre.raw_data(), y.raw_data());
        };
        Tensor want_pre = nan.clone(), want_y = nan.clone();
        run(cpu_kernels(), cpu_stream(), x, W, bias, want_pre, want_y);
        const Tensor gx = x.to(gpu()), gW = W.to(gpu()), gbias = bias.to(gpu());
        Tensor got_pre = nan.to(gpu()), got_y = nan.to(gpu());
        run(gpu_kernels(), gpu_stream(), gx, gW, gbias, got_pre, got_y);
        const std::string what = std::string(dtype_name(operands)) + " linear_gelu_forward rows=" +
                                 std::to_string(s.rows) + " in=" + std::to_string(s.in) +
                                 " out=" + std::to_string(s.out) + (with_bias ? " with bias" : " without bias");
        const Tensor bound = linear_bound(x, W, with_bias ? bias : Tensor(), s.rows, s.in, s.out);
        require_within(got_pre, want_pre, bound, rtol, what + ": the pre-activation");
        // y's bound: 1.13·bound + |y|, elementwise.
        Tensor y_bound = abs_f64(want_y);
        cpu_kernels().add_scaled(cpu_stream(), DType::f64, y_bound.numel(), 1.13, bound.raw_data(), y_bound.raw_data());
        require_within(got_y, want_y, y_bound, rtol, what + ": gelu");
      }
    }
  }
}

// The residual as C with beta 1 and the bias epilogue (linear_add_forward) against the CPU's default
// entry, the composition linear_forward then the add kernel, on the same inputs; in_features 0
// takes the fallback. Tolerance: the products' rtol of the header comment times the bound plus
// |residual| (the sum's own rounding is within u·|y|, inside it). The residual stays as it was,
// and y, NaN before, is written everywhere (beta 1 reads the residual, never y).
TEST_CASE("cuda linear_add_forward: the residual as C (beta 1) with the bias epilogue matches the CPU's linear then "
          "add",
          "[cuda][gemm]") {
  struct Size {
    std::int64_t rows, in, out;
  };
  const Size sizes[] = {{1, 7, 8}, {33, 129, 7}, {1000, 33, 256}, {7, 1000, 65}, {5, 0, 16}};
  std::uint64_t salt = 900;
  for (const DType operands : {DType::f32, DType::f64, DType::bf16}) {
    const DType out_dtype = operands == DType::bf16 ? DType::f32 : operands;
    const double rtol = operands == DType::f64 ? kRtolF64 : kRtolF32;
    for (const Size& s : sizes) {
      for (const bool with_bias : {false, true}) {
        const Tensor x = random_normal({s.rows, s.in}, fresh_seed(++salt), operands);
        const Tensor W = random_normal({s.out, s.in}, fresh_seed(++salt), operands);
        const Tensor bias = random_normal({s.out}, fresh_seed(++salt), out_dtype);
        const Tensor residual = random_normal({s.rows, s.out}, fresh_seed(++salt), out_dtype);
        const Tensor nan = Tensor::full({s.rows, s.out}, kNaN, out_dtype);  // overwritten, never read
        const auto run = [&](kernels::Backend& k, const Stream& st, const Tensor& xx, const Tensor& ww,
                             const Tensor& bb, const Tensor& rr, Tensor& y) {
          k.linear_add_forward(st, operands, s.rows, s.in, s.out, xx.raw_data(), ww.raw_data(),
                               with_bias ? bb.raw_data() : nullptr, rr.raw_data(), y.raw_data());
        };
        Tensor want = nan.clone();
        run(cpu_kernels(), cpu_stream(), x, W, bias, residual, want);
        const Tensor gx = x.to(gpu()), gW = W.to(gpu()), gbias = bias.to(gpu()), gresidual = residual.to(gpu());
        Tensor got = nan.to(gpu());
        run(gpu_kernels(), gpu_stream(), gx, gW, gbias, gresidual, got);
        const std::string what = std::string(dtype_name(operands)) + " linear_add_forward rows=" +
                                 std::to_string(s.rows) + " in=" + std::to_string(s.in) +
                                 " out=" + std::to_string(s.out) + (with_bias ? " with bias" : " without bias");
        Tensor bound = linear_bound(x, W, with_bias ? bias : Tensor(), s.rows, s.in, s.out);
        const Tensor residual_abs = abs_f64(residual);
        cpu_kernels().add_scaled(cpu_stream(), DType::f64, bound.numel(), 1.0, residual_abs.raw_data(),
                                 bound.raw_data());
        require_within(got, want, bound, rtol, what);
        require_within(gresidual, residual, Tensor::zeros({s.rows, s.out}, DType::f64), 0.0,
                       what + ": the residual, unchanged");
      }
    }
  }
}

TEST_CASE("cuda gemm: TF32 by switch stays within its rounding, is named in the description and switches off",
          "[cuda][gemm]") {
  REQUIRE(kernels::cuda::cuda_gemm_description().find("cuBLASLt") != std::string::npos);
  {
    const Tf32Scope tf32(true);
    REQUIRE(kernels::cuda::cuda_tf32());
    REQUIRE(kernels::cuda::cuda_gemm_description().find("TF32 (") != std::string::npos);
    // TF32 keeps 10 significand bits (u = 2^-11): within 2e-3 of the bound, and still no NaN.
    const GemmCase c{false, true, 129, 33, 1000, 0, 1.0, 0.0, true};
    const Tensor A = random_normal({c.a_rows(), c.lda()}, fresh_seed(700));
    const Tensor B = random_normal({c.b_rows(), c.ldb()}, fresh_seed(701));
    const Tensor C = initial_c(c, 0, DType::f32);
    Tensor want = C.clone();
    cpu_kernels().gemm(cpu_stream(), DType::f32, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.raw_data(), c.lda(),
                       B.raw_data(), c.ldb(), c.beta, want.raw_data(), c.ldc());
    const Tensor gA = A.to(gpu()), gB = B.to(gpu());
    Tensor got = C.to(gpu());
    gpu_kernels().gemm(gpu_stream(), DType::f32, c.ta, c.tb, c.M, c.N, c.K, c.alpha, gA.raw_data(), c.lda(),
                       gB.raw_data(), c.ldb(), c.beta, got.raw_data(), c.ldc());
    require_within(got, want, product_bound(c, A, B, C), 2e-3, "f32 with TF32 " + c.str());
  }
  REQUIRE_FALSE(kernels::cuda::cuda_tf32());
}

}  // namespace wf::cuda_test
