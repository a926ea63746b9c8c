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
