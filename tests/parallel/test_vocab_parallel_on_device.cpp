// The vocabulary-parallel cross-entropy and embedding entry points of the test device's backend
// (kernels/backend.h) against the CPU's, bit for bit, for every rank of a simulated tp group of 3
// (the all-reduces done here, on the host copies). The pieces' arithmetic is tested against the
// single-device reference in tests/kernels/test_vocab_parallel.cpp; this checks that the device's
// entries take their scalars (count, upstream gradient) from device memory and write the same bits.
// The entries' calls are tests/support/sp_cases.cpp (tests/cuda/test_sp_on_cuda.cpp runs them on a GPU).
#include <catch2/catch.hpp>

#include <cstring>
#include <utility>
#include <vector>

#include "support/sp_cases.h"
#include "wallfacer/core/tensor.h"

using wf::Device;
using wf::Tensor;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

}  // namespace

TEST_CASE("vocab-parallel entries on the test device match the CPU's bit for bit", "[parallel][vocab][testdev]") {
  for (const bool mean : {true, false}) {
    CAPTURE(mean);
    const wf::parity::VocabPieces cpu = wf::parity::run_vocab_parallel_entries(Device::cpu(), mean);
    const wf::parity::VocabPieces dev = wf::parity::run_vocab_parallel_entries(Device::test(), mean);
    CHECK(dev.count.device() == Device::test());
    CHECK(cpu.count.item() == 4);
    CHECK(same_bits(dev.count, cpu.count));
    CHECK(same_bits(dev.lse, cpu.lse));
    CHECK(same_bits(dev.loss, cpu.loss));
    CHECK(same_bits(dev.dx, cpu.dx));
  }
}

TEST_CASE("the vocab-parallel embedding's id map on the test device matches the CPU's", "[parallel][vocab][testdev]") {
  const std::vector<std::pair<Tensor, Tensor>> out = {wf::parity::run_vocab_parallel_local_ids(Device::cpu()),
                                                       wf::parity::run_vocab_parallel_local_ids(Device::test())};
  CHECK(same_bits(out[1].first, out[0].first));
  CHECK(same_bits(out[1].second, out[0].second));
  CHECK(out[0].second.to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 0});
}

TEST_CASE("the replica check's spreads on the test device match the CPU's", "[parallel][testdev]") {
  const std::vector<Tensor> out = {wf::parity::run_replica_spread(Device::cpu()),
                                   wf::parity::run_replica_spread(Device::test())};
  CHECK(same_bits(out[1], out[0]));
}
