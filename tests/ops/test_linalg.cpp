// matmul (batched, transposed, broadcast b) and linear against triple loops, plus gradcheck;
// linear_gelu and linear_add against the compositions gelu(linear) and add(residual, linear) they fuse.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>

#include "ops/ops_testing.h"
#include "wallfacer/ops/activation.h"
#include "wallfacer/ops/arithmetic.h"
#include "wallfacer/ops/linalg.h"

using namespace wf;
using namespace wf::testing;

namespace {

// Stored shape of an operand whose op() is [rows, cols], with batch dims in front.
Shape stored(const Shape& batch, std::int64_t rows, std::int64_t cols, bool transposed) {
  Shape s = batch;
  s.push_back(transposed ? cols : rows);
  s.push_back(transposed ? rows : cols);
  return s;
}

// C[b, i, j] = Σ_k op(A)[b, i, k]·op(B)[b, k, j]; a 2-D B is shared over the batch.
Tensor matmul_reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const std::int64_t M = ta ? a.size(-1) : a.size(-2), K = ta ? a.size(-2) : a.size(-1);
  const std::int64_t N = tb ? b.size(-2) : b.size(-1);
  const std::int64_t batch = a.numel() / (M * K);
  const bool b_shared = b.dim() == 2;
  Shape out_shape(a.shape().begin(), a.shape().end() - 2);
  out_shape.insert(out_shape.end(), {M, N});
  Tensor out = Tensor::empty(out_shape, DType::f64);
  for (std::int64_t p = 0; p < batch; ++p) {
    const std::int64_t a0 = p * M * K, b0 = b_shared ? 0 : p * K * N;
    for (std::int64_t i = 0; i < M; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const double av = a.at(a0 + (ta ? k * M + i : i * K + k));
          const double bv = b.at(b0 + (tb ? j * K + k : k * N + j));
          acc += av * bv;
        }
        out.set((p * M + i) * N + j, acc);
      }
    }
  }
  return out;
}

struct MatmulCase {
  Shape a_batch, b_batch;  // b_batch empty: b is 2-D
};
const std::vector<MatmulCase> kMatmulCases = {
    {{}, {}},          // plain 2-D
    {{2}, {2}},        // batched
    {{2, 2}, {2, 2}},  // two batch dims
    {{3}, {}},         // b shared across the batch
    {{2, 2}, {}},      // b shared across two batch dims
};

}  // namespace

TEST_CASE("matmul matches a triple loop for every transpose and batch layout", "[ops][linalg]") {
  const std::int64_t M = 3, K = 4, N = 2;
  for (const auto& c : kMatmulCases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("a batch " << shape_str(c.a_batch) << " b batch " << shape_str(c.b_batch) << " ta " << ta << " tb " << tb);
        const Tensor a = random(stored(c.a_batch, M, K, ta), 1), b = random(stored(c.b_batch, K, N, tb), 2);
        require_close(matmul(a, b, ta, tb), matmul_reference(a, b, ta, tb), 1e-13, 1e-13);
        const Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
        const Tensor c32 = matmul(a32, b32, ta, tb);
        CHECK(c32.dtype() == DType::f32);
        require_close(c32, matmul_reference(a32, b32, ta, tb), 1e-5, 1e-5);
      }
    }
  }
}

TEST_CASE("matmul passes gradcheck for every transpose and batch layout", "[ops][linalg][gradcheck]") {
  const std::int64_t M = 3, K = 2, N = 2;
  for (const auto& c : kMatmulCases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("a batch " << shape_str(c.a_batch) << " b batch " << shape_str(c.b_batch) << " ta " << ta << " tb " << tb);
        Tensor a = random_leaf(stored(c.a_batch, M, K, ta), 3), b = random_leaf(stored(c.b_batch, K, N, tb), 4);
        require_gradcheck([&](const TensorList& in) { return TensorList{matmul(in[0], in[1], ta, tb)}; }, {a, b});
      }
    }
  }
}

TEST_CASE("matmul gradient flows to one operand only when the other is constant", "[ops][linalg]") {
  Tensor a = random_leaf({2, 3, 4}, 5);
  const Tensor b = random({4, 2}, 6);
  matmul(a, b).backward(Tensor::ones({2, 3, 2}, DType::f64));
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shape() == Shape{2, 3, 4});
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("matmul errors name the shapes", "[ops][linalg][errors]") {
  const Tensor a = random({2, 3}, 1);
  REQUIRE_THROWS_WITH(matmul(a, random({4, 5}, 2)), Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(random({2, 2, 3}, 1), random({3, 3, 2}, 2)),
                      Catch::Contains("[2, 2, 3]") && Catch::Contains("[3, 3, 2]"));
  REQUIRE_THROWS_WITH(matmul(random({3}, 1), random({3, 2}, 2)), Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(matmul(a, random({3, 2}, 2, DType::f32)), Catch::Contains("f32"));
  // a shared 2-D `a` against a batched b is not a supported layout.
  REQUIRE_THROWS_WITH(matmul(a, random({2, 3, 2}, 2)), Catch::Contains("2-D"));
}

TEST_CASE("linear equals x·Wᵀ + b over any leading dims", "[ops][linalg]") {
  const Tensor w = random({5, 4}, 2), bias = random({5}, 3);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    INFO("x " << shape_str(xs));
    const Tensor x = random(xs, 1);
    const std::int64_t rows = x.numel() / 4;
    Shape ys = xs;
    ys.back() = 5;
    Tensor expected = Tensor::empty(ys, DType::f64), expected_nobias = Tensor::empty(ys, DType::f64);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t o = 0; o < 5; ++o) {
        double acc = 0;
        for (std::int64_t i = 0; i < 4; ++i) acc += x.at(r * 4 + i) * w.at(o * 4 + i);
        expected_nobias.set(r * 5 + o, acc);
        expected.set(r * 5 + o, acc + bias.at(o));
      }
    }
    require_close(linear(x, w, bias), expected, 1e-13, 1e-13);
    require_close(linear(x, w), expected_nobias, 1e-13, 1e-13);
  }
}

TEST_CASE("linear passes gradcheck with and without bias", "[ops][linalg][gradcheck]") {
  Tensor x = random_leaf({2, 3, 4}, 7), w = random_leaf({3, 4}, 8), bias = random_leaf({3}, 9);
  require_gradcheck([](const TensorList& in) { return TensorList{linear(in[0], in[1], in[2])}; }, {x, w, bias});
  require_gradcheck([](const TensorList& in) { return TensorList{linear(in[0], in[1])}; }, {x, w});
  Tensor x1 = random_leaf({4}, 10);
  require_gradcheck([](const TensorList& in) { return TensorList{linear(in[0], in[1], in[2])}; }, {x1, w, bias});
}

TEST_CASE("linear errors name the shapes", "[ops][linalg][errors]") {
  const Tensor x = random({2, 4}, 1), w = random({3, 4}, 2);
  REQUIRE_THROWS_WITH(linear(x, random({3, 5}, 2)), Catch::Contains("[2, 4]") && Catch::Contains("[3, 5]"));
  REQUIRE_THROWS_WITH(linear(x, w, random({4}, 3)), Catch::Contains("[4]") && Catch::Contains("[3, 4]"));
}

// bf16 products multiply in bf16 and accumulate in f32 (kernels/cpu/gemm.h: gemm_bf16), then
// round once. The oracle is the f32 product of the widened operands, rounded the same way: the
// two differ only in f32 summation order, which can move a result across one bf16 rounding
// boundary — hence 1 bf16 ulp (2^-8 relative) plus a small absolute term for results near 0.
namespace {
constexpr double kBf16Ulp = 1.0 / 256;
void require_bf16_close(const Tensor& actual, const Tensor& expected_f32) {
  REQUIRE(actual.dtype() == DType::bf16);
  require_close(actual.to(DType::f64), expected_f32.to(DType::bf16).to(DType::f64), kBf16Ulp * 0.5, kBf16Ulp);
}
}  // namespace

TEST_CASE("bf16 linear computes in f32 and rounds once", "[ops][linalg][bf16]") {
  const Tensor x = random({3, 8}, 1, DType::bf16), w = random({5, 8}, 2, DType::bf16), b = random({5}, 3, DType::bf16);
  const Tensor y = linear(x, w, b);
  const Tensor y32 = linear(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32));
  require_bf16_close(y, y32);
  // Larger: the native kernel's blocking (and panels over two threads) come into play.
  const Tensor xl = random({2, 70, 96}, 4, DType::bf16), wl = random({130, 96}, 5, DType::bf16);
  require_bf16_close(linear(xl, wl), linear(xl.to(DType::f32), wl.to(DType::f32)));
}

TEST_CASE("bf16 matmul and its gradients match the f32 product of the widened operands", "[ops][linalg][bf16]") {
  const std::int64_t M = 9, K = 33, N = 17;
  for (const auto& c : kMatmulCases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("a batch " << shape_str(c.a_batch) << " b batch " << shape_str(c.b_batch) << " ta " << ta << " tb " << tb);
        Tensor a = random(stored(c.a_batch, M, K, ta), 10, DType::bf16);
        Tensor b = random(stored(c.b_batch, K, N, tb), 11, DType::bf16);
        Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
        for (Tensor* t : {&a, &b, &a32, &b32}) t->set_requires_grad(true);
        const Tensor y = matmul(a, b, ta, tb), y32 = matmul(a32, b32, ta, tb);
        require_bf16_close(y, y32);
        // The same upstream gradient, exactly representable in both.
        const Tensor g = random(y.shape(), 12, DType::bf16);
        y.backward(g);
        y32.backward(g.to(DType::f32));
        require_bf16_close(a.grad(), a32.grad());
        require_bf16_close(b.grad(), b32.grad());
      }
    }
  }
}

TEST_CASE("linear mixes bf16 activations with f32 master weights: bf16 out, f32 weight gradients",
          "[ops][linalg][bf16]") {
  Tensor x = random({2, 5, 24}, 20, DType::bf16), w = random({7, 24}, 21, DType::f32), b = random({7}, 22, DType::f32);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  const Tensor y = linear(x, w, b);
  REQUIRE(y.dtype() == DType::bf16);
  // The oracle: the same bf16 values of x and of the rounded weight, in f32 throughout.
  Tensor x32 = x.detach().to(DType::f32), w32 = w.detach().to(DType::bf16).to(DType::f32), b32 = b.detach().clone();
  for (Tensor* t : {&x32, &w32, &b32}) t->set_requires_grad(true);
  const Tensor y32 = linear(x32, w32, b32);
  require_bf16_close(y, y32);
  const Tensor g = random(y.shape(), 23, DType::bf16);
  y.backward(g);
  y32.backward(g.to(DType::f32));
  REQUIRE(w.grad().dtype() == DType::f32);
  REQUIRE(b.grad().dtype() == DType::f32);
  require_bf16_close(x.grad(), x32.grad());
  // f32 gradients straight from the f32 accumulators: as close as f32 summation order allows.
  require_close(w.grad().to(DType::f64), w32.grad().to(DType::f64), 1e-5, 1e-5);
  require_close(b.grad().to(DType::f64), b32.grad().to(DType::f64), 1e-5, 1e-5);
  // Any other mix is refused, naming the dtypes.
  CHECK_THROWS_WITH(linear(x.detach(), w.detach().to(DType::f64)), Catch::Contains("bf16") && Catch::Contains("f64"));
}

// ---- linear_gelu: gelu(linear(x, W, b)) as one op -----------------------------------------------

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() &&
         (!a.defined() || (a.dtype() == b.dtype() && a.shape() == b.shape() &&
                           (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0)));
}

// The output of `op` and the gradients of its inputs (undefined where an input is), on the CPU,
// run on `device` for the upstream gradient g.
TensorList op_results(const std::function<Tensor(const TensorList&)>& op, const TensorList& inputs, const Tensor& g,
                      Device device) {
  TensorList leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.defined() ? t.to(device).clone() : Tensor();
    if (leaf.defined()) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  const Tensor y = op(leaves);
  y.backward(g.to(device));
  TensorList out{y.detach().to(Device::cpu())};
  for (const Tensor& leaf : leaves) out.push_back(leaf.defined() ? leaf.grad().to(Device::cpu()) : Tensor());
  return out;
}

// The output and the gradients of x, W and b (undefined without bias), on the CPU, of the fused op
// or of the composition, run on `device` for the upstream gradient g.
TensorList linear_gelu_results(bool fused, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g,
                               Device device) {
  return op_results(
      [fused](const TensorList& in) {
        return fused ? linear_gelu(in[0], in[1], in[2]) : gelu(linear(in[0], in[1], in[2]));
      },
      {x, w, b}, g, device);
}

// Every result of `got` and `want` has the same bytes (results as op_results gives them).
void check_same_results(const TensorList& got, const TensorList& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO((i == 0 ? "the output" : "the gradient of input " + std::to_string(i - 1)));
    CHECK(same_bytes(got[i], want[i]));
  }
}

// The dtypes of x and of the weight and bias: each alone, and mixed precision (f32 masters).
struct LinearDtypes {
  DType x, weight;
};
constexpr LinearDtypes kLinearDtypes[] = {
    {DType::f32, DType::f32}, {DType::f64, DType::f64}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}};

}  // namespace

// The CPU computes the pair as the composition (kernels/backend.h: linear_gelu_forward's default,
// and bf16 keeps its rounding of the pre-activation), so every parity test of the models keeps its
// bits. The test device runs the same default through its own entries: the seam, proven on a CPU.
TEST_CASE("linear_gelu equals gelu(linear) bit for bit, output and gradients, on the CPU and the test device",
          "[ops][linalg][testdev]") {
  std::uint64_t seed = 40;
  for (const LinearDtypes& d : kLinearDtypes) {
    for (const std::int64_t out : {16, 7}) {
      for (const bool with_bias : {true, false}) {
        const Tensor x = random({2, 5, 24}, ++seed, d.x), w = random({out, 24}, ++seed, d.weight);
        const Tensor b = with_bias ? random({out}, ++seed, d.weight) : Tensor();
        const Tensor g = random({2, 5, out}, ++seed, d.x);
        const TensorList want = linear_gelu_results(false, x, w, b, g, Device::cpu());
        for (const Device device : {Device::cpu(), Device::test()}) {
          INFO("x " << dtype_name(d.x) << ", weight " << dtype_name(d.weight) << ", out " << out
                    << (with_bias ? ", bias" : ", no bias") << " on " << device.str());
          check_same_results(linear_gelu_results(true, x, w, b, g, device), want);
        }
      }
    }
  }
}

TEST_CASE("linear_gelu passes gradcheck with and without bias", "[ops][linalg][gradcheck]") {
  const Tensor x = random_leaf({2, 3, 4}, 60), w = random_leaf({5, 4}, 61), bias = random_leaf({5}, 62);
  require_gradcheck([](const TensorList& in) { return TensorList{linear_gelu(in[0], in[1], in[2])}; }, {x, w, bias});
  require_gradcheck([](const TensorList& in) { return TensorList{linear_gelu(in[0], in[1])}; }, {x, w});
}

TEST_CASE("linear_gelu errors name the op and the shapes", "[ops][linalg][errors]") {
  const Tensor x = random({2, 4}, 1);
  REQUIRE_THROWS_WITH(linear_gelu(x, random({3, 5}, 2)),
                      Catch::Contains("linear_gelu") && Catch::Contains("[2, 4]") && Catch::Contains("[3, 5]"));
  REQUIRE_THROWS_WITH(linear_gelu(x, random({3, 4}, 2), random({4}, 3)),
                      Catch::Contains("linear_gelu") && Catch::Contains("[4]"));
}

// ---- linear_add: residual + linear(x, W, b) as one op -------------------------------------------

namespace {

// As linear_gelu_results, for linear_add and add(residual, linear); the last gradient is the residual's.
TensorList linear_add_results(bool fused, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual,
                              const Tensor& g, Device device) {
  return op_results(
      [fused](const TensorList& in) {
        return fused ? linear_add(in[0], in[1], in[2], in[3]) : add(in[3], linear(in[0], in[1], in[2]));
      },
      {x, w, b, residual}, g, device);
}

}  // namespace

// As linear_gelu: the CPU's linear_add_forward is the composition, and bf16 keeps the rounding of
// linear's output before the add, so the transformer block's feed-forward keeps its bits.
TEST_CASE("linear_add equals add(residual, linear) bit for bit, output and gradients, on the CPU and the test device",
          "[ops][linalg][testdev]") {
  std::uint64_t seed = 70;
  for (const LinearDtypes& d : kLinearDtypes) {
    for (const std::int64_t out : {16, 7}) {
      for (const bool with_bias : {true, false}) {
        const Tensor x = random({2, 5, 24}, ++seed, d.x), w = random({out, 24}, ++seed, d.weight);
        const Tensor b = with_bias ? random({out}, ++seed, d.weight) : Tensor();
        const Tensor residual = random({2, 5, out}, ++seed, d.x), g = random({2, 5, out}, ++seed, d.x);
        const TensorList want = linear_add_results(false, x, w, b, residual, g, Device::cpu());
        for (const Device device : {Device::cpu(), Device::test()}) {
          INFO("x " << dtype_name(d.x) << ", weight " << dtype_name(d.weight) << ", out " << out
                    << (with_bias ? ", bias" : ", no bias") << " on " << device.str());
          check_same_results(linear_add_results(true, x, w, b, residual, g, device), want);
        }
      }
    }
  }
}

TEST_CASE("linear_add passes gradcheck in every input, with and without bias", "[ops][linalg][gradcheck]") {
  const Tensor x = random_leaf({2, 3, 4}, 80), w = random_leaf({5, 4}, 81), bias = random_leaf({5}, 82);
  const Tensor residual = random_leaf({2, 3, 5}, 83);
  require_gradcheck([](const TensorList& in) { return TensorList{linear_add(in[0], in[1], in[2], in[3])}; },
                    {x, w, bias, residual});
  require_gradcheck([](const TensorList& in) { return TensorList{linear_add(in[0], in[1], Tensor(), in[2])}; },
                    {x, w, residual});
}

// The residual's gradient is the output's, handed on without a copy (add's backward does the same).
TEST_CASE("linear_add hands the output's gradient to the residual as it is", "[ops][linalg]") {
  Tensor residual = random({3, 5}, 90);
  residual.set_requires_grad(true);
  const Tensor y = linear_add(random({3, 4}, 91), random({5, 4}, 92), Tensor(), residual);
  const Tensor g = random({3, 5}, 93);
  y.backward(g);
  CHECK(same_bytes(residual.grad(), g));
}

TEST_CASE("linear_add errors name the op, the residual and the fix", "[ops][linalg][errors]") {
  const Tensor x = random({2, 4}, 1), w = random({3, 4}, 2);
  REQUIRE_THROWS_WITH(linear_add(x, random({3, 5}, 2), Tensor(), random({2, 3}, 3)),
                      Catch::Contains("linear_add") && Catch::Contains("[2, 4]") && Catch::Contains("[3, 5]"));
  REQUIRE_THROWS_WITH(linear_add(x, w, Tensor(), random({3}, 3)),
                      Catch::Contains("linear_add") && Catch::Contains("residual of shape [3]") &&
                          Catch::Contains("[2, 3]") && Catch::Contains("broadcasting"));
  REQUIRE_THROWS_WITH(linear_add(x, w, Tensor(), Tensor()),
                      Catch::Contains("linear_add") && Catch::Contains("residual is undefined"));
  // Mixed precision: the residual is the activation's dtype (bf16), not the masters' (f32).
  REQUIRE_THROWS_WITH(linear_add(x.to(DType::bf16), w.to(DType::f32), Tensor(), random({2, 3}, 3, DType::f32)),
                      Catch::Contains("linear_add") && Catch::Contains("bf16") && Catch::Contains("f32"));
}
