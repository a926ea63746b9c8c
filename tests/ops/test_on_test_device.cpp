// Every op runs on the test device (src/core/test_device.h) through its backend's kernels and gives
// the CPU's results bit for bit, forward and backward, in f32, f64 and bf16. The test device's
// memory faults on any host touch, so an op that fell back to a host loop or a kernels::cpu call
// would kill this test rather than pass it. The same cases run once more with its streams as
// queues with random delays, which only the stream order keeps correct.
// The case list is tests/support/op_cases.cpp (tests/cuda/test_ops_on_cuda.cpp runs it on a GPU).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "src/core/test_device_streams.h"
#include "support/op_cases.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/ops/ops.h"

namespace {

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::parity::OpCase;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.defined() == b.defined() &&
         (!a.defined() || (a.dtype() == b.dtype() && a.shape() == b.shape() &&
                           (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0)));
}

void check_every_op_matches_cpu(DType dtype) {
  std::uint64_t seed = 1000;
  for (const OpCase& c : wf::parity::op_cases()) {
    CAPTURE(c.name, wf::dtype_name(dtype));
    const std::vector<Tensor> inputs = wf::parity::make_op_inputs(c.inputs, dtype, seed);
    const std::vector<Tensor> cpu = wf::parity::op_outputs_on(c, inputs, Device::cpu(), seed + 100);
    const std::vector<Tensor> dev = wf::parity::op_outputs_on(c, inputs, Device::test(), seed + 100);
    REQUIRE(cpu.size() == dev.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(i);  // 0: the output, then each floating input's gradient
      CHECK(same_bytes(dev[i], cpu[i]));
    }
    seed += 10;
  }
}

}  // namespace

TEST_CASE("ops on the test device match the CPU bit for bit, forward and backward", "[ops][testdev]") {
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) check_every_op_matches_cpu(dtype);
}

TEST_CASE("ops on the test device keep their results when its streams queue with random delays",
          "[ops][testdev]") {
  wf::detail::set_test_device_async(true, 50);
  try {
    check_every_op_matches_cpu(DType::f32);
  } catch (...) {
    wf::detail::set_test_device_async(false);
    throw;
  }
  wf::detail::set_test_device_async(false);
}

TEST_CASE("an op on the test device waits for nothing on the host", "[ops][testdev]") {
  const Tensor x = Tensor::randn_at({4, 8}, 5, 0).to(Device::test());
  const Tensor w = Tensor::randn_at({8, 8}, 6, 0).to(Device::test());
  const std::int64_t before = wf::host_sync_count();
  Tensor y = wf::softmax(wf::linear(wf::gelu(x), w));
  const Tensor loss = wf::cross_entropy(y, Tensor::zeros({4}, DType::i64, Device::test()));
  CHECK(wf::host_sync_count() == before);  // forward: no host read
  (void)loss;
}
