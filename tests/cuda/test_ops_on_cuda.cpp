// Every op on the GPU against the CPU, forward and backward, in f32, f64 and bf16: the case list
// the test device runs bit for bit (tests/support/op_cases.cpp), here within each dtype's
// tolerance (tests/cuda/parity_tolerance.h says which and why), with every output and gradient
// finite where the CPU's is. One section per case and dtype, so one failing op leaves the others
// reported.
#include <cstdint>
#include <string>
#include <vector>

#include "support/op_cases.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_tolerance.h"
#include "wallfacer/ops/linalg.h"

using wf::Device;
using wf::DType;
using wf::Tensor;

TEST_CASE("cuda: every op matches the CPU within its dtype's tolerance, forward and backward", "[cuda][ops]") {
  const DType dtype = GENERATE(DType::f32, DType::f64, DType::bf16);
  const std::vector<wf::parity::OpCase> cases = wf::parity::op_cases();
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const wf::parity::OpCase& c = cases[n];
    DYNAMIC_SECTION(c.name << ", " << wf::dtype_name(dtype)) {
      const std::uint64_t seed = wf::cuda_test::fresh_seed(100 + n);
      const std::vector<Tensor> inputs = wf::parity::make_op_inputs(c.inputs, dtype, seed);
      const std::vector<Tensor> cpu = wf::parity::op_outputs_on(c, inputs, Device::cpu(), seed + 100);
      const std::vector<Tensor> gpu = wf::parity::op_outputs_on(c, inputs, wf::cuda_test::gpu(), seed + 100);
      REQUIRE(gpu.size() == cpu.size());
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        INFO((i == 0 ? std::string("the output") : "the gradient of input " + std::to_string(i - 1)));
        CHECK(wf::cuda_test::mismatch(gpu[i], cpu[i], wf::cuda_test::op_tolerance(dtype)) == "");
      }
    }
  }
}

// linear_gelu and linear_add under mixed precision (bf16 activations, f32 master weight and bias),
// the MLP's fc and proj in a bf16 run, at sizes that take the GELU epilogue (out 64, a multiple of
// 8) and the GELU's fallback (out 30); linear_add takes its epilogue wherever cuBLASLt offers the
// residual as C. The output and the gradients of x, W, b (and the residual) against the CPU, whose
// composition rounds linear's output to bf16 before the GELU or the add while the epilogue does
// not (a difference of at most a bf16 step or two, inside bf16's 2e-2); W's and b's gradients are
// f32 on both.
TEST_CASE("cuda: linear_gelu and linear_add with bf16 activations and f32 masters match the CPU, forward and backward",
          "[cuda][ops]") {
  for (const bool add : {false, true}) {
    for (const std::int64_t out : {64, 30}) {
      const std::uint64_t seed = wf::cuda_test::fresh_seed(900 + static_cast<std::uint64_t>(out) + (add ? 100 : 0));
      const Tensor x = Tensor::randn_at({2, 9, 48}, seed, 0, DType::f64).to(DType::bf16);
      const Tensor w = Tensor::randn_at({out, 48}, seed + 1, 0, DType::f64).to(DType::f32);
      const Tensor b = Tensor::randn_at({out}, seed + 2, 0, DType::f64).to(DType::f32);
      const Tensor g = Tensor::randn_at({2, 9, out}, seed + 3, 0, DType::f64).to(DType::bf16);
      const Tensor r = Tensor::randn_at({2, 9, out}, seed + 4, 0, DType::f64).to(DType::bf16);
      const auto results = [&](Device device) {
        std::vector<Tensor> leaves;
        for (const Tensor& t : add ? std::vector<Tensor>{x, w, b, r} : std::vector<Tensor>{x, w, b}) {
          Tensor leaf = t.to(device).clone();
          leaf.set_requires_grad(true);
          leaves.push_back(leaf);
        }
        const Tensor y = add ? wf::linear_add(leaves[0], leaves[1], leaves[2], leaves[3])
                             : wf::linear_gelu(leaves[0], leaves[1], leaves[2]);
        y.backward(g.to(device));
        std::vector<Tensor> out{y.detach().to(Device::cpu())};
        for (const Tensor& leaf : leaves) out.push_back(leaf.grad().to(Device::cpu()));
        return out;
      };
      const std::vector<Tensor> cpu = results(Device::cpu()), gpu = results(wf::cuda_test::gpu());
      const DType dtypes[] = {DType::bf16, DType::bf16, DType::f32, DType::f32, DType::bf16};
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        INFO((add ? "linear_add" : "linear_gelu")
             << ", out " << out << ", "
             << (i == 0 ? std::string("the output") : "the gradient of input " + std::to_string(i - 1)));
        CHECK(gpu[i].dtype() == dtypes[i]);
        CHECK(wf::cuda_test::mismatch(gpu[i], cpu[i], wf::cuda_test::op_tolerance(DType::bf16)) == "");
      }
    }
  }
}
