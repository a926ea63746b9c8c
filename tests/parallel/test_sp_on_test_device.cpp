// Sequence-parallel attention's local computation on the test device (src/core/test_device.h),
// whose memory faults on any host touch: so a kernels::cpu call, a loop over data<T>() or a
// memcpy of its tensors anywhere on these paths ends the test. Each computation runs on the
// CPU and on the test device (inline and with asynchronous, randomly delayed streams), and the
// results must be the same bits, with no host synchronisation while it computes:
//   - block attention over two K/V blocks merged, forward and backward with a gradient on lse;
//   - ring, Ulysses and WallFacer at sp = 1 (in one process: no message, but every strategy's
//     own tensors, its Ulysses exchange with itself and WallFacer's D on the device);
//   - the backend entries WallFacer's combine and Ulysses' message use (kernels/backend.h).
// The computations are tests/support/sp_cases.cpp (tests/cuda/test_sp_on_cuda.cpp runs them on a GPU).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/core/test_device_streams.h"
#include "support/sp_cases.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/parallel/sp_strategy.h"

using wf::Device;
using wf::DType;
using wf::Tensor;

namespace {

// Same dtype, shape and bytes, `got` (any device) against `want` (CPU).
bool same_bits(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(Device::cpu());
  return g.dtype() == want.dtype() && g.shape() == want.shape() &&
         std::memcmp(g.raw_data(), want.raw_data(), want.nbytes()) == 0;
}

// Turns the test device's asynchronous streams on for one scope.
class AsyncScope {
 public:
  explicit AsyncScope(bool on) : on_(on) {
    if (on_) wf::detail::set_test_device_async(true);
  }
  ~AsyncScope() {
    if (on_) wf::detail::set_test_device_async(false);
  }
  AsyncScope(const AsyncScope&) = delete;
  AsyncScope& operator=(const AsyncScope&) = delete;

 private:
  bool on_;
};

}  // namespace

TEST_CASE("block attention on the test device gives the CPU's bits, with no host synchronisation",
          "[parallel][test_device]") {
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  const bool async = GENERATE(false, true);
  INFO(wf::dtype_name(dtype) << (async ? ", asynchronous streams" : ", inline streams"));
  const wf::parity::BlockProblem p = wf::parity::block_problem(dtype);
  std::int64_t cpu_syncs = 0, device_syncs = 0;
  const wf::parity::BlockResult want = wf::parity::run_blocks(p, Device::cpu(), &cpu_syncs);
  AsyncScope scope(async);
  const wf::parity::BlockResult got = wf::parity::run_blocks(p, Device::test(), &device_syncs);
  CHECK(device_syncs == 0);
  CHECK(same_bits(got.o, want.o));
  CHECK(same_bits(got.lse, want.lse));
  CHECK(same_bits(got.dq, want.dq));
  for (int j = 0; j < 2; ++j) {
    CHECK(same_bits(got.dk[j], want.dk[j]));
    CHECK(same_bits(got.dv[j], want.dv[j]));
  }
}

TEST_CASE("ring, Ulysses and WallFacer at sp = 1 give the CPU's bits on the test device", "[parallel][test_device]") {
  const wf::parallel::SpStrategy strategy =
      GENERATE(wf::parallel::SpStrategy::ring, wf::parallel::SpStrategy::ulysses, wf::parallel::SpStrategy::wallfacer);
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  const bool async = GENERATE(false, true);
  INFO(wf::parallel::sp_strategy_name(strategy) << ", " << wf::dtype_name(dtype)
                                                << (async ? ", asynchronous streams" : ", inline streams"));
  const auto attention = wf::parity::attention_at_sp1(strategy);
  const wf::parity::StrategyResult want = wf::parity::run_strategy(*attention, dtype, Device::cpu());
  AsyncScope scope(async);
  const wf::parity::StrategyResult got = wf::parity::run_strategy(*attention, dtype, Device::test());
  CHECK(got.out.device() == Device::test());
  CHECK(same_bits(got.out, want.out));
  CHECK(same_bits(got.lse, want.lse));
  CHECK(same_bits(got.dq, want.dq));
  CHECK(same_bits(got.dk, want.dk));
  CHECK(same_bits(got.dv, want.dv));
}

TEST_CASE("the sp backend entries give the CPU's bits on the test device", "[parallel][test_device]") {
  const DType dtype = GENERATE(DType::f64, DType::f32);
  const bool async = GENERATE(false, true);
  INFO(wf::dtype_name(dtype) << (async ? ", asynchronous streams" : ", inline streams"));
  AsyncScope scope(async);
  const wf::parity::SpEntryOutputs want = wf::parity::run_sp_entries(dtype, Device::cpu());
  const wf::parity::SpEntryOutputs got = wf::parity::run_sp_entries(dtype, Device::test());
  CHECK(same_bits(got.lse_star, want.lse_star));
  CHECK(same_bits(got.weight, want.weight));
  CHECK(same_bits(got.scaled, want.scaled));
  CHECK(same_bits(got.minus_delta, want.minus_delta));
  CHECK(same_bits(got.message, want.message));
  CHECK(same_bits(got.summed, want.summed));
  CHECK(want.weight.at(7) == 0.0);  // not a vacuous comparison: the -inf row and the sum are there
  CHECK(want.summed.at({0, 3, 1, 0}) != 0.0);
}
