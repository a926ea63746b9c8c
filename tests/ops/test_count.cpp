// count_targets_device: the count of targets that are not ignored, as a 0-dim i64 tensor on the
// targets' device, equals the host count_targets on the CPU and on the test device (whose memory
// the host cannot touch: the count is computed by its kernel).
#include <catch2/catch.hpp>

#include <random>

#include "wallfacer/ops/count.h"
#include "wallfacer/ops/loss.h"

using wf::Device;
using wf::DType;
using wf::Tensor;

TEST_CASE("count_targets_device counts on the targets' device what count_targets counts", "[ops][count]") {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_int_distribution<std::int64_t> token(-1, 4);
  for (const std::int64_t n : {0, 1, 9, 300}) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (auto& id : ids) id = token(gen);
    const Tensor targets = Tensor::from_vector(ids, {n});
    INFO("n=" << n);
    for (const Device device : {Device::cpu(), Device::test()}) {
      const Tensor count = wf::count_targets_device(targets.to(device), -1);
      CHECK(count.device() == device);
      CHECK(count.dtype() == DType::i64);
      CHECK(count.dim() == 0);
      CHECK(count.to(Device::cpu()).item() == static_cast<double>(wf::count_targets(targets, -1)));
    }
    // i32 targets count alike (converted on their device).
    const Tensor narrow = targets.to(DType::i32).to(Device::test());
    CHECK(wf::count_targets_device(narrow, -1).to(Device::cpu()).item() ==
          static_cast<double>(wf::count_targets(targets, -1)));
  }
  CHECK_THROWS_WITH(wf::count_targets_device(Tensor()), Catch::Contains("count_targets_device"));
}
