// The CUDA elementwise entries (kernels/cuda/elementwise.cpp) against the CPU's on the same fresh
// random inputs, f32 and f64, sizes with odd tails.
//
// Tolerances: the linear entries (binary_broadcast, affine, add_scaled, the bias and residual adds,
// clamp, the scalings), tanh's backward and dropout do the CPU's IEEE operations one by one, never
// fused (kernels/cuda/elementwise.h), so they must give the CPU's bits: require_equal. gelu, silu,
// exp, ln and tanh call CUDA's libm (<= 2 ulp) where the CPU calls glibc or, for f32 GELU, its SIMD
// tanh (absolute error <= 2e-7): f32 within 1e-5 relative plus an absolute 2e-6 (GELU's 1 + tanh
// cancels for negative x, so its error is absolute, |x|/2 times tanh's, and |x| < 6 here) and 1e-5
// for the backwards (the derivative multiplies tanh's error by up to ~2 for these inputs, and dy
// is N(0, 1)); f64 within 1e-12 relative plus 1e-13.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;
using wf::kernels::BinaryOp;
using wf::kernels::DropoutLayout;
using wf::kernels::UnaryOp;
using Dims = std::vector<std::int64_t>;

std::int64_t numel_of(const Dims& shape) {
  std::int64_t n = 1;
  for (const std::int64_t e : shape) n *= e;
  return n;
}

// One f64 on the GPU: a factor or coefficient the step computed.
Tensor device_scalar(double value) { return Tensor::from_vector<double>({value}, {1}).to(gpu()); }

double rtol_of(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-12; }

}  // namespace

TEST_CASE("cuda binary_broadcast gives the CPU's bits for every op and broadcast of ranks 0 to 7",
          "[cuda][elementwise]") {
  struct Case {
    Dims a, b, out;
  };
  const Case cases[] = {
      {{}, {}, {}},                                            // 0-dim scalars
      {{1000}, {1000}, {1000}},                                // equal shapes
      {{1}, {33}, {33}},                                       // scalar (op) vector
      {{31, 257}, {1, 257}, {31, 257}},                        // a bias over the last dim
      {{31, 257}, {31, 1}, {31, 257}},                         // a per-row factor
      {{5, 1}, {1, 7}, {5, 7}},                                // outer product
      {{2, 1, 33}, {1, 3, 1}, {2, 3, 33}},                     // both sides broadcast
      {{3, 1, 5, 1}, {1, 4, 1, 6}, {3, 4, 5, 6}},              // alternating
      {{2, 3, 1, 5, 7}, {2, 1, 4, 5, 1}, {2, 3, 4, 5, 7}},     // rank 5
      {{2, 1, 2, 1, 3, 1, 2}, {1, 2, 1, 2, 1, 3, 1}, {2, 2, 2, 2, 3, 3, 2}},  // 7 unmergeable dims
      {{2, 0, 3}, {1, 1, 3}, {2, 0, 3}},                       // empty
      {{2, 1, 2, 1, 2, 1, 2, 1, 0}, {1, 2, 1, 2, 1, 2, 1, 2, 1}, {2, 2, 2, 2, 2, 2, 2, 2, 0}},  // empty, 9 dims
      {{4, 1}, {1, 1}, {4, 1}},
  };
  const DType dtype = GENERATE(DType::f32, DType::f64);
  std::uint64_t salt = 100;
  for (const Case& c : cases) {
    const Tensor a = random_normal({numel_of(c.a)}, fresh_seed(++salt), dtype);
    // Divisors away from 0: b = x + sign(x)/2.
    const Tensor x = random_normal({numel_of(c.b)}, fresh_seed(++salt), DType::f64);
    std::vector<double> bv = x.to_vector<double>();
    for (double& v : bv) v += v >= 0 ? 0.5 : -0.5;
    const Tensor b = Tensor::from_vector<double>(bv, {numel_of(c.b)}).to(dtype);
    const Tensor ag = a.to(gpu()), bg = b.to(gpu());
    for (const BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      Tensor want = Tensor::full({numel_of(c.out)}, -99.0, dtype);
      Tensor got = Tensor::full({numel_of(c.out)}, -99.0, dtype, gpu());
      cpu_kernels().binary_broadcast(cpu_stream(), dtype, op, a.raw_data(), c.a, b.raw_data(), c.b, want.raw_data(),
                                     c.out);
      gpu_kernels().binary_broadcast(gpu_stream(), dtype, op, ag.raw_data(), c.a, bg.raw_data(), c.b, got.raw_data(),
                                     c.out);
      require_equal(got, want,
                    std::string(kernels::binary_op_name(op)) + " " + Catch::Detail::stringify(c.a) + " with " +
                        Catch::Detail::stringify(c.b) + " (" + dtype_name(dtype) + ")");
    }
  }
}

TEST_CASE("cuda binary_broadcast refuses more independent dims than its kernel walks", "[cuda][elementwise]") {
  // Nine dims where a and b alternate between read and broadcast: nothing merges.
  const Dims a = {2, 1, 2, 1, 2, 1, 2, 1, 2}, b = {1, 2, 1, 2, 1, 2, 1, 2, 1}, out(9, 2);
  const Tensor ag = Tensor::zeros({numel_of(a)}, DType::f32, gpu()), bg = Tensor::zeros({numel_of(b)}, DType::f32, gpu());
  Tensor got = Tensor::empty({numel_of(out)}, DType::f32, gpu());
  REQUIRE_THROWS_WITH(gpu_kernels().binary_broadcast(gpu_stream(), DType::f32, BinaryOp::add, ag.raw_data(), a,
                                                     bg.raw_data(), b, got.raw_data(), out),
                      Catch::Contains("at most 8"));
}

TEST_CASE("cuda affine, add_scaled, add_bias and bias_residual_add give the CPU's bits", "[cuda][elementwise]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const std::int64_t rows = GENERATE(as<std::int64_t>{}, 0, 1, 33, 257);  // 0: no launch (a 0-block grid fails)
  const std::int64_t cols = GENERATE(as<std::int64_t>{}, 1, 31, 1000);
  const std::int64_t n = rows * cols;
  const std::uint64_t seed = fresh_seed(static_cast<std::uint64_t>(rows * 7919 + cols));
  const Tensor x = random_normal({n}, seed, dtype), r = random_normal({n}, seed + 1, dtype);
  const Tensor bias = random_normal({cols}, seed + 2, dtype);
  const Tensor xg = x.to(gpu()), rg = r.to(gpu()), bias_g = bias.to(gpu());
  INFO("rows " << rows << " cols " << cols << " " << dtype_name(dtype));

  for (const double shift : {0.0, -0.375}) {  // shift 0 is the CPU's scale(): alpha·x, no + 0
    Tensor want = Tensor::empty({n}, dtype), got = Tensor::empty({n}, dtype, gpu());
    cpu_kernels().affine(cpu_stream(), dtype, n, 1.7, shift, x.raw_data(), want.raw_data());
    gpu_kernels().affine(gpu_stream(), dtype, n, 1.7, shift, xg.raw_data(), got.raw_data());
    require_equal(got, want, "affine");
  }
  {
    Tensor want = r.clone(), got = r.to(gpu());
    cpu_kernels().add_scaled(cpu_stream(), dtype, n, -0.3, x.raw_data(), want.raw_data());
    gpu_kernels().add_scaled(gpu_stream(), dtype, n, -0.3, xg.raw_data(), got.raw_data());
    require_equal(got, want, "add_scaled");
  }
  {
    Tensor want = Tensor::empty({n}, dtype), got = Tensor::empty({n}, dtype, gpu());
    cpu_kernels().add_bias(cpu_stream(), dtype, rows, cols, x.raw_data(), bias.raw_data(), want.raw_data());
    gpu_kernels().add_bias(gpu_stream(), dtype, rows, cols, xg.raw_data(), bias_g.raw_data(), got.raw_data());
    require_equal(got, want, "add_bias");
  }
  for (const bool with_bias : {true, false}) {
    Tensor want = Tensor::empty({n}, dtype), got = Tensor::empty({n}, dtype, gpu());
    cpu_kernels().bias_residual_add(cpu_stream(), dtype, rows, cols, x.raw_data(),
                                    with_bias ? bias.raw_data() : nullptr, r.raw_data(), want.raw_data());
    gpu_kernels().bias_residual_add(gpu_stream(), dtype, rows, cols, xg.raw_data(),
                                    with_bias ? bias_g.raw_data() : nullptr, rg.raw_data(), got.raw_data());
    require_equal(got, want, with_bias ? "bias_residual_add" : "residual add (no bias)");
  }
  {  // in place: out == x, as linear_forward adds its bias to the product
    Tensor want = x.clone(), got = x.to(gpu());
    cpu_kernels().add_bias(cpu_stream(), dtype, rows, cols, want.raw_data(), bias.raw_data(), want.raw_data());
    gpu_kernels().add_bias(gpu_stream(), dtype, rows, cols, got.raw_data(), bias_g.raw_data(), got.raw_data());
    require_equal(got, want, "add_bias in place");
  }
  {  // in place: out == x
    Tensor want = x.clone(), got = x.to(gpu());
    cpu_kernels().bias_residual_add(cpu_stream(), dtype, rows, cols, want.raw_data(), bias.raw_data(), r.raw_data(),
                                    want.raw_data());
    gpu_kernels().bias_residual_add(gpu_stream(), dtype, rows, cols, got.raw_data(), bias_g.raw_data(),
                                    rg.raw_data(), got.raw_data());
    require_equal(got, want, "bias_residual_add in place");
  }
}

TEST_CASE("cuda unary_forward and unary_backward match the CPU for every op", "[cuda][elementwise]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const UnaryOp op = GENERATE(UnaryOp::gelu, UnaryOp::silu, UnaryOp::exp, UnaryOp::ln, UnaryOp::tanh);
  const std::int64_t n = GENERATE(as<std::int64_t>{}, 0, 1, 31, 33, 257, 100003);
  const std::uint64_t seed = fresh_seed(static_cast<std::uint64_t>(n) * 5 + static_cast<std::uint64_t>(op));
  Tensor x = random_normal({n}, seed, DType::f64);
  if (op == UnaryOp::ln) {  // positive inputs over many scales: e^N(0, 3²)
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) e = std::exp(3 * e);
    x = Tensor::from_vector<double>(v, {n});
  }
  x = x.to(dtype);
  const Tensor dy = random_normal({n}, seed + 1, dtype);
  const Tensor xg = x.to(gpu()), dyg = dy.to(gpu());
  const std::string what = std::string(kernels::unary_op_name(op)) + " (" + dtype_name(dtype) + ", n " +
                           std::to_string(n) + ")";
  const double rtol = rtol_of(dtype);

  Tensor want = Tensor::empty({n}, dtype), got = Tensor::empty({n}, dtype, gpu());
  cpu_kernels().unary_forward(cpu_stream(), dtype, op, n, x.raw_data(), want.raw_data());
  gpu_kernels().unary_forward(gpu_stream(), dtype, op, n, xg.raw_data(), got.raw_data());
  require_close(got, want, rtol, dtype == DType::f32 ? 2e-6 : 1e-13, what + " forward");

  if (op == UnaryOp::exp || op == UnaryOp::ln) {
    Tensor dx = Tensor::empty({n}, dtype, gpu());
    REQUIRE_THROWS_WITH(gpu_kernels().unary_backward(gpu_stream(), dtype, op, n, xg.raw_data(), dyg.raw_data(),
                                                     dx.raw_data()),
                        Catch::Contains("ordinary product or quotient"));
    return;
  }
  // tanh's backward reads the output y: both sides get the CPU's y.
  const Tensor saved = op == UnaryOp::tanh ? want : x;
  const Tensor saved_g = saved.to(gpu());
  Tensor dx_want = Tensor::empty({n}, dtype), dx_got = Tensor::empty({n}, dtype, gpu());
  cpu_kernels().unary_backward(cpu_stream(), dtype, op, n, saved.raw_data(), dy.raw_data(), dx_want.raw_data());
  gpu_kernels().unary_backward(gpu_stream(), dtype, op, n, saved_g.raw_data(), dyg.raw_data(), dx_got.raw_data());
  if (op == UnaryOp::tanh) {
    require_equal(dx_got, dx_want, what + " backward");  // dy·(1 − y·y): the same three operations
  } else {
    require_close(dx_got, dx_want, rtol, dtype == DType::f32 ? 1e-5 : 1e-13, what + " backward");
  }
}

TEST_CASE("cuda dropout_mask keeps exactly the CPU's elements for whole tensors and slices", "[cuda][elementwise]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);
  struct Case {
    std::int64_t n;
    DropoutLayout layout;
    double p;
    std::uint64_t first;
  };
  const Case cases[] = {
      {100003, {100003, 100003, 0}, 0.1, 0},         // a whole tensor
      {1000, {10, 30, 20}, 0.3, 1000},               // slice 2 of 3 along the last dim (tp)
      {33 * 64, {64, 64, 64 * 257}, 0.5, 12345},     // a run of rows further into the tensor (sp)
      {31, {1, 3, 2}, 0.9, (1ull << 40) + 7},        // one element in three, far into the stream
      {257, {7, 19, 5}, 0.0, 3},                     // p = 0 keeps everything (scale 1)
      {4099, {4099, 4099, 0}, 0.999, 1ull << 62},    // nearly everything dropped
      {0, {1, 1, 0}, 0.5, 0},                        // nothing: no launch
  };
  std::uint64_t salt = 500;
  for (const Case& c : cases) {
    const std::uint64_t seed = fresh_seed(++salt);
    const Tensor x = random_normal({c.n}, seed, dtype);
    const Tensor xg = x.to(gpu());
    Tensor want = Tensor::empty({c.n}, dtype), got = Tensor::full({c.n}, -7.0, dtype, gpu());
    cpu_kernels().dropout_mask(cpu_stream(), dtype, c.n, c.p, seed, c.first, c.layout, x.raw_data(),
                               want.raw_data());
    gpu_kernels().dropout_mask(gpu_stream(), dtype, c.n, c.p, seed, c.first, c.layout, xg.raw_data(),
                               got.raw_data());
    require_equal(got, want,
                  "dropout n " + std::to_string(c.n) + " block " + std::to_string(c.layout.block) + " stride " +
                      std::to_string(c.layout.stride) + " start " + std::to_string(c.layout.start) + " p " +
                      std::to_string(c.p) + " (" + dtype_name(dtype) + ")");
  }
}

TEST_CASE("cuda clamp, scale_inplace, scale_inplace_by and scale_by_coefficient give the CPU's bits",
          "[cuda][elementwise]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const std::int64_t n = GENERATE(as<std::int64_t>{}, 0, 1, 33, 1000, 65537);
  const std::uint64_t seed = fresh_seed(static_cast<std::uint64_t>(n) + 900);
  std::vector<double> v = random_normal({n}, seed, DType::f64).to_vector<double>();
  if (n > 2) {  // NaN and infinities go through clamp and the scalings as on the CPU
    v[1] = std::numeric_limits<double>::quiet_NaN();
    v[2] = -std::numeric_limits<double>::infinity();
  }
  const Tensor x = Tensor::from_vector<double>(v, {n}).to(dtype);
  const Tensor xg = x.to(gpu());
  INFO("n " << n << " " << dtype_name(dtype));
  {
    Tensor want = Tensor::empty({n}, dtype), got = Tensor::empty({n}, dtype, gpu());
    cpu_kernels().clamp(cpu_stream(), dtype, n, -0.5, 0.75, x.raw_data(), want.raw_data());
    gpu_kernels().clamp(gpu_stream(), dtype, n, -0.5, 0.75, xg.raw_data(), got.raw_data());
    require_equal(got, want, "clamp");
  }
  {
    Tensor want = x.clone(), got = x.to(gpu());
    cpu_kernels().scale_inplace(cpu_stream(), dtype, n, want.raw_data(), 0.1);
    gpu_kernels().scale_inplace(gpu_stream(), dtype, n, got.raw_data(), 0.1);
    require_equal(got, want, "scale_inplace");
  }
  {
    const double factor = 1.0 / 3.0;
    const Tensor host_factor = Tensor::from_vector<double>({factor}, {1});
    const Tensor device_factor = device_scalar(factor);
    Tensor want = x.clone(), got = x.to(gpu());
    cpu_kernels().scale_inplace_by(cpu_stream(), dtype, n, want.raw_data(), host_factor.data<double>());
    gpu_kernels().scale_inplace_by(gpu_stream(), dtype, n, got.raw_data(), device_factor.data<double>());
    require_equal(got, want, "scale_inplace_by");
  }
  for (const double coefficient : {0.3, 1.0, 2.5, std::numeric_limits<double>::quiet_NaN()}) {
    const Tensor host_c = Tensor::from_vector<double>({coefficient}, {1});
    const Tensor device_c = device_scalar(coefficient);
    Tensor want = x.clone(), got = x.to(gpu());
    cpu_kernels().scale_by_coefficient(cpu_stream(), dtype, n, want.raw_data(), host_c.data<double>());
    gpu_kernels().scale_by_coefficient(gpu_stream(), dtype, n, got.raw_data(), device_c.data<double>());
    require_equal(got, want, "scale_by_coefficient " + std::to_string(coefficient));
  }
}

TEST_CASE("cuda elementwise entries refuse dtypes the CPU refuses", "[cuda][elementwise]") {
  const Tensor x = Tensor::zeros({4}, DType::bf16, gpu());
  Tensor y = Tensor::zeros({4}, DType::bf16, gpu());
  REQUIRE_THROWS_WITH(gpu_kernels().affine(gpu_stream(), DType::bf16, 4, 2.0, 0.0, x.raw_data(), y.raw_data()),
                      Catch::Contains("bf16"));
  REQUIRE_THROWS_WITH(gpu_kernels().unary_forward(gpu_stream(), DType::i64, UnaryOp::exp, 4, x.raw_data(),
                                                  y.raw_data()),
                      Catch::Contains("i64"));
}
