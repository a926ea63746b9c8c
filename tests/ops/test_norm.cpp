// layer_norm and rms_norm: forward values against the naive kernel references (f32 to 1e-5,
// f64 to 1e-12), gradients against central differences (f64 gradcheck, default tolerances)
// with and without the affine parameters, the bf16 path against f32, and argument errors.
#include <catch2/catch.hpp>

#include "kernels/cpu/norm.h"
#include "ops/ops_testing.h"
#include "wallfacer/ops/norm.h"

using namespace wf;
using namespace wf::testing;
namespace cpu = wf::kernels::cpu;

namespace {

constexpr double kEps = 1e-5;

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-12; }

// The reference kernels on a tensor viewed as [rows, last dim]; undefined weight/bias = none.
Tensor layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const std::int64_t cols = x.size(-1), rows = x.numel() / cols;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "test", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> mean(rows), rstd(rows);
    cpu::layernorm_forward_reference<T>(rows, cols, x.data<T>(), weight.defined() ? weight.data<T>() : nullptr,
                                        bias.defined() ? bias.data<T>() : nullptr, kEps, y.data<T>(), mean.data(),
                                        rstd.data());
  });
  return y;
}
Tensor rms_norm_reference(const Tensor& x, const Tensor& weight) {
  const std::int64_t cols = x.size(-1), rows = x.numel() / cols;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "test", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> rstd(rows);
    cpu::rmsnorm_forward_reference<T>(rows, cols, x.data<T>(), weight.defined() ? weight.data<T>() : nullptr, kEps,
                                      y.data<T>(), rstd.data());
  });
  return y;
}

}  // namespace

TEST_CASE("layer_norm and rms_norm match the reference kernels", "[ops][norm]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = random({3, 2, 7}, 1, dtype), w = random({7}, 2, dtype), b = random({7}, 3, dtype);
    const double tol = tolerance(dtype);
    require_close(layer_norm(x, w, b, kEps), layer_norm_reference(x, w, b), tol, tol);
    require_close(layer_norm(x, Tensor(), Tensor(), kEps), layer_norm_reference(x, Tensor(), Tensor()), tol, tol);
    require_close(layer_norm(x, w, Tensor(), kEps), layer_norm_reference(x, w, Tensor()), tol, tol);
    require_close(rms_norm(x, w, kEps), rms_norm_reference(x, w), tol, tol);
    require_close(rms_norm(x, Tensor(), kEps), rms_norm_reference(x, Tensor()), tol, tol);
    CHECK(layer_norm(x, w, b, kEps).dtype() == dtype);
  }
}

TEST_CASE("layer_norm gradients pass gradcheck with and without affine", "[ops][norm][gradcheck]") {
  const Tensor x = random_leaf({2, 3, 4}, 11), w = random_leaf({4}, 12), b = random_leaf({4}, 13);
  SECTION("weight and bias") {
    require_gradcheck([](const TensorList& in) { return TensorList{layer_norm(in[0], in[1], in[2], kEps)}; },
                      {x, w, b});
  }
  SECTION("no affine") {
    require_gradcheck([](const TensorList& in) { return TensorList{layer_norm(in[0], Tensor(), Tensor(), kEps)}; },
                      {x});
  }
  SECTION("weight only, and bias only") {
    require_gradcheck([](const TensorList& in) { return TensorList{layer_norm(in[0], in[1], Tensor(), kEps)}; },
                      {x, w});
    require_gradcheck([](const TensorList& in) { return TensorList{layer_norm(in[0], Tensor(), in[1], kEps)}; },
                      {x, b});
  }
  SECTION("constant x, trainable parameters") {
    require_gradcheck([](const TensorList& in) { return TensorList{layer_norm(in[0], in[1], in[2], kEps)}; },
                      {x.detach(), w, b});
  }
}

TEST_CASE("rms_norm gradients pass gradcheck with and without weight", "[ops][norm][gradcheck]") {
  const Tensor x = random_leaf({3, 5}, 21), w = random_leaf({5}, 22);
  require_gradcheck([](const TensorList& in) { return TensorList{rms_norm(in[0], in[1], kEps)}; }, {x, w});
  require_gradcheck([](const TensorList& in) { return TensorList{rms_norm(in[0], Tensor(), kEps)}; }, {x});
  // A 1-D input is a single row.
  require_gradcheck([](const TensorList& in) { return TensorList{rms_norm(in[0], in[1], kEps)}; },
                    {random_leaf({5}, 23), w});
}

TEST_CASE("bf16 norms compute in f32 and round the result", "[ops][norm]") {
  const Tensor x32 = random({4, 8}, 31, DType::f32), w32 = random({8}, 32, DType::f32), b32 = random({8}, 33, DType::f32);
  const Tensor x = x32.to(DType::bf16), w = w32.to(DType::bf16), b = b32.to(DType::bf16);
  // Against f32 on the same (bf16-representable) values: only the final rounding differs.
  const Tensor want = layer_norm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), kEps);
  const Tensor got = layer_norm(x, w, b, kEps);
  REQUIRE(got.dtype() == DType::bf16);
  require_close(got.to(DType::f32), want, 1e-2, 1e-2);

  Tensor xl = x.clone(), wl = w.clone();
  xl.set_requires_grad(true);
  wl.set_requires_grad(true);
  Tensor xf = x.to(DType::f32), wf32 = w.to(DType::f32);
  xf.set_requires_grad(true);
  wf32.set_requires_grad(true);
  rms_norm(xl, wl, kEps).backward(Tensor::ones({4, 8}, DType::bf16));
  rms_norm(xf, wf32, kEps).backward(Tensor::ones({4, 8}, DType::f32));
  REQUIRE(xl.grad().dtype() == DType::bf16);
  require_close(xl.grad().to(DType::f32), xf.grad(), 2e-2, 2e-2);
  require_close(wl.grad().to(DType::f32), wf32.grad(), 5e-2, 2e-2);
}

TEST_CASE("norm argument errors name the shapes and dtypes", "[ops][norm][errors]") {
  const Tensor x = random({2, 4}, 41, DType::f32);
  REQUIRE_THROWS_WITH(layer_norm(x, random({3}, 42, DType::f32), Tensor()),
                      Catch::Contains("weight has shape [3]") && Catch::Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(layer_norm(x, Tensor(), random({4, 1}, 43, DType::f32)),
                      Catch::Contains("bias has shape [4, 1]") && Catch::Contains("[4]"));
  REQUIRE_THROWS_WITH(rms_norm(x, random({4}, 44, DType::f64)), Catch::Contains("f64") && Catch::Contains("f32"));
  REQUIRE_THROWS_WITH(rms_norm(Tensor::scalar(1.0), Tensor()), Catch::Contains("rms_norm") && Catch::Contains("[]"));
  REQUIRE_THROWS_WITH(layer_norm(Tensor::zeros({2, 4}, DType::i64), Tensor(), Tensor()), Catch::Contains("i64"));
  REQUIRE_THROWS_WITH(layer_norm(x, Tensor(), Tensor(), -1.0), Catch::Contains("eps"));
}
