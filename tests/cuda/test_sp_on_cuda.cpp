// Sequence-parallel attention's local computation and the sp and vocabulary-parallel backend
// entries on the GPU against the CPU (tests/support/sp_cases.cpp, which the test device runs bit
// for bit), within each dtype's tolerance (tests/cuda/parity_tolerance.h), with no host
// synchronisation while block attention computes:
//   - block attention over two K/V blocks merged, forward and backward with a gradient on lse;
//   - ring, Ulysses and WallFacer at sp = 1 (one process: every strategy's own tensors, its
//     Ulysses exchange with itself and WallFacer's D on the GPU);
//   - WallFacer's lse combine, the attention rows' scaling and D, a Ulysses block on the wire;
//   - the vocabulary-parallel loss's entries for every rank of a simulated tp group of 3, the
//     embedding's id map and the replica check's spreads (exact where the CPU's are by design).
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "support/sp_cases.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/parity_tolerance.h"
#include "wallfacer/parallel/sp_strategy.h"

using wf::Device;
using wf::DType;
using wf::Tensor;
using wf::cuda_test::mismatch;
using wf::cuda_test::op_tolerance;

namespace {

// The bf16 values a Ulysses message carries (its bytes, copied to the CPU).
Tensor message_values(const Tensor& message) {
  const Tensor bytes = message.to(Device::cpu());
  Tensor values = Tensor::empty({bytes.numel() / 2}, DType::bf16);
  std::memcpy(values.raw_data(), bytes.raw_data(), bytes.nbytes());
  return values;
}

}  // namespace

TEST_CASE("cuda: block attention matches the CPU, with no host synchronisation", "[cuda][parallel][attention]") {
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  INFO(wf::dtype_name(dtype));
  const wf::parity::BlockProblem p = wf::parity::block_problem(dtype);
  std::int64_t cpu_syncs = 0, gpu_syncs = 0;
  const wf::parity::BlockResult want = wf::parity::run_blocks(p, Device::cpu(), &cpu_syncs);
  const wf::parity::BlockResult got = wf::parity::run_blocks(p, wf::cuda_test::gpu(), &gpu_syncs);
  CHECK(gpu_syncs == 0);
  const wf::cuda_test::Tolerance tol = op_tolerance(dtype);
  CHECK(mismatch(got.o, want.o, tol) == "");
  CHECK(mismatch(got.lse, want.lse, tol) == "");
  CHECK(mismatch(got.dq, want.dq, tol) == "");
  for (int j = 0; j < 2; ++j) {
    CAPTURE(j);
    CHECK(mismatch(got.dk[j], want.dk[j], tol) == "");
    CHECK(mismatch(got.dv[j], want.dv[j], tol) == "");
  }
}

TEST_CASE("cuda: ring, Ulysses and WallFacer at sp = 1 match the CPU", "[cuda][parallel][attention]") {
  const wf::parallel::SpStrategy strategy =
      GENERATE(wf::parallel::SpStrategy::ring, wf::parallel::SpStrategy::ulysses, wf::parallel::SpStrategy::wallfacer);
  const DType dtype = GENERATE(DType::f64, DType::f32, DType::bf16);
  INFO(wf::parallel::sp_strategy_name(strategy) << ", " << wf::dtype_name(dtype));
  const auto attention = wf::parity::attention_at_sp1(strategy);
  const wf::parity::StrategyResult want = wf::parity::run_strategy(*attention, dtype, Device::cpu());
  const wf::parity::StrategyResult got = wf::parity::run_strategy(*attention, dtype, wf::cuda_test::gpu());
  CHECK(got.out.device() == wf::cuda_test::gpu());
  const wf::cuda_test::Tolerance tol = op_tolerance(dtype);
  CHECK(mismatch(got.out, want.out, tol) == "");
  CHECK(mismatch(got.lse, want.lse, tol) == "");
  CHECK(mismatch(got.dq, want.dq, tol) == "");
  CHECK(mismatch(got.dk, want.dk, tol) == "");
  CHECK(mismatch(got.dv, want.dv, tol) == "");
}

TEST_CASE("cuda: the sp backend entries match the CPU", "[cuda][parallel]") {
  const DType dtype = GENERATE(DType::f64, DType::f32);
  INFO(wf::dtype_name(dtype));
  const wf::parity::SpEntryOutputs want = wf::parity::run_sp_entries(dtype, Device::cpu());
  const wf::parity::SpEntryOutputs got = wf::parity::run_sp_entries(dtype, wf::cuda_test::gpu());
  const wf::cuda_test::Tolerance tol = op_tolerance(dtype);
  CHECK(mismatch(got.lse_star, want.lse_star, tol) == "");
  CHECK(mismatch(got.weight, want.weight, tol) == "");
  CHECK(mismatch(got.scaled, want.scaled, tol) == "");
  CHECK(mismatch(got.minus_delta, want.minus_delta, tol) == "");
  // The message is bf16 on the wire: the same values within bf16's tolerance (an f32 difference
  // in `scaled` may round to the neighbouring bf16), and so its sum.
  REQUIRE(got.message.nbytes() == want.message.nbytes());
  CHECK(mismatch(message_values(got.message), message_values(want.message), op_tolerance(DType::bf16)) == "");
  CHECK(mismatch(got.summed, want.summed, op_tolerance(DType::bf16)) == "");
  CHECK(want.weight.at(7) == 0.0);  // not a vacuous comparison: the -inf row and the sum are there
  CHECK(got.weight.to(Device::cpu()).at(7) == 0.0);
  CHECK(want.summed.at({0, 3, 1, 0}) != 0.0);
}

TEST_CASE("cuda: the vocab-parallel entries match the CPU", "[cuda][parallel][vocab]") {
  for (const bool mean : {true, false}) {
    CAPTURE(mean);
    const wf::parity::VocabPieces cpu = wf::parity::run_vocab_parallel_entries(Device::cpu(), mean);
    const wf::parity::VocabPieces gpu = wf::parity::run_vocab_parallel_entries(wf::cuda_test::gpu(), mean);
    CHECK(gpu.count.device() == wf::cuda_test::gpu());
    CHECK(cpu.count.item() == 4);
    CHECK(mismatch(gpu.count, cpu.count, {}) == "");  // a count: exact
    CHECK(mismatch(gpu.max, cpu.max, op_tolerance(DType::f32)) == "");
    CHECK(mismatch(gpu.sums, cpu.sums, op_tolerance(DType::f32)) == "");
    CHECK(mismatch(gpu.lse, cpu.lse, op_tolerance(DType::f32)) == "");
    CHECK(mismatch(gpu.loss, cpu.loss, op_tolerance(DType::f32)) == "");
    CHECK(mismatch(gpu.dx, cpu.dx, op_tolerance(DType::f32)) == "");
  }
}

TEST_CASE("cuda: the vocab-parallel embedding's id map and the replica check's spreads match the CPU",
          "[cuda][parallel][vocab]") {
  const std::pair<Tensor, Tensor> want = wf::parity::run_vocab_parallel_local_ids(Device::cpu());
  const std::pair<Tensor, Tensor> got = wf::parity::run_vocab_parallel_local_ids(wf::cuda_test::gpu());
  CHECK(mismatch(got.first, want.first, {}) == "");  // gathers and masks: exact
  CHECK(mismatch(got.second, want.second, {}) == "");
  CHECK(want.second.to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 0});
  CHECK(mismatch(wf::parity::run_replica_spread(wf::cuda_test::gpu()), wf::parity::run_replica_spread(Device::cpu()),
                 op_tolerance(DType::f64)) == "");
}
