// comm::choose_gpu_transport: the rule `comm.gpu_transport` follows (comm/transport.h), on golden
// placements. Pure arithmetic: the same answer on every rank.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "wallfacer/comm/transport.h"
#include "wallfacer/core/error.h"

using wf::Device;
using wf::comm::choose_gpu_transport;
using wf::comm::GpuTransport;
using wf::comm::RankDevice;

namespace {

// `ranks` ranks on `nodes` nodes of `gpus` GPUs each, placed as comm::Runtime places them.
std::vector<RankDevice> placement(int ranks, int per_node, int gpus) {
  std::vector<RankDevice> out;
  for (int r = 0; r < ranks; ++r) out.push_back({"node" + std::to_string(r / per_node), (r % per_node) % gpus});
  return out;
}

}  // namespace

TEST_CASE("auto picks nccl only where every rank has a GPU of its own and the build has NCCL", "[comm][transport]") {
  const Device gpu = Device::cuda(0);
  CHECK(choose_gpu_transport(GpuTransport::automatic, gpu, true, placement(16, 8, 8)).transport == GpuTransport::nccl);
  // Two nodes whose GPUs have the same indices are still distinct GPUs.
  CHECK(choose_gpu_transport(GpuTransport::automatic, gpu, true, placement(2, 1, 1)).transport == GpuTransport::nccl);
  const auto shared = choose_gpu_transport(GpuTransport::automatic, gpu, true, placement(4, 4, 1));
  CHECK(shared.transport == GpuTransport::staged);
  CHECK_THAT(shared.reason, Catch::Contains("world rank 1") && Catch::Contains("NCCL refuses"));
  // A world of one needs no communicator: auto leaves NCCL alone, an explicit nccl is kept.
  CHECK(choose_gpu_transport(GpuTransport::automatic, gpu, true, placement(1, 1, 1)).transport ==
        GpuTransport::staged);
  CHECK(choose_gpu_transport(GpuTransport::nccl, gpu, true, placement(1, 1, 1)).transport == GpuTransport::nccl);
  const auto unbuilt = choose_gpu_transport(GpuTransport::automatic, gpu, false, placement(8, 8, 8));
  CHECK(unbuilt.transport == GpuTransport::staged);
  CHECK_THAT(unbuilt.reason, Catch::Contains("no NCCL"));
}

TEST_CASE("an explicit transport is kept where it can serve and refused with the fix where it cannot",
          "[comm][transport]") {
  const Device gpu = Device::cuda(0);
  CHECK(choose_gpu_transport(GpuTransport::staged, gpu, true, placement(8, 8, 8)).transport == GpuTransport::staged);
  CHECK(choose_gpu_transport(GpuTransport::nccl, gpu, true, placement(8, 8, 8)).transport == GpuTransport::nccl);
  CHECK_THROWS_WITH(choose_gpu_transport(GpuTransport::nccl, gpu, true, placement(4, 4, 2)),
                    Catch::Contains("comm.gpu_transport is nccl") && Catch::Contains("share a GPU") &&
                        Catch::Contains("comm.gpu_transport: staged"));
  CHECK_THROWS_WITH(choose_gpu_transport(GpuTransport::nccl, gpu, false, placement(1, 1, 1)),
                    Catch::Contains("no NCCL"));
}

TEST_CASE("the cpu needs no device transport; the test device's stand-in serves any placement",
          "[comm][transport]") {
  CHECK(choose_gpu_transport(GpuTransport::nccl, Device::cpu(), false, {}).transport == GpuTransport::staged);
  const auto testdev = choose_gpu_transport(GpuTransport::automatic, Device::test(), false, placement(4, 4, 1));
  CHECK(testdev.transport == GpuTransport::nccl);
  CHECK(choose_gpu_transport(GpuTransport::staged, Device::test(), false, {}).transport == GpuTransport::staged);
}

TEST_CASE("GPUs are told apart by their UUIDs where the runtime gives them", "[comm][transport]") {
  const Device gpu = Device::cuda(0);
  // CUDA_VISIBLE_DEVICES per rank: every rank sees its own GPU as cuda:0 of one machine.
  const std::vector<RankDevice> own = {{"node0", 0, "GPU-aaaaaaaa-0000-0000-0000-000000000000"},
                                       {"node0", 0, "GPU-bbbbbbbb-0000-0000-0000-000000000000"}};
  CHECK(choose_gpu_transport(GpuTransport::automatic, gpu, true, own).transport == GpuTransport::nccl);
  // One GPU seen under two indices is still one GPU.
  const std::vector<RankDevice> same = {{"node0", 0, "GPU-aaaaaaaa-0000-0000-0000-000000000000"},
                                        {"node0", 1, "GPU-aaaaaaaa-0000-0000-0000-000000000000"}};
  const auto shared = choose_gpu_transport(GpuTransport::automatic, gpu, true, same);
  CHECK(shared.transport == GpuTransport::staged);
  CHECK_THAT(shared.reason, Catch::Contains("world rank 1 is on cuda:1 GPU-aaaaaaaa"));
  // Without UUIDs, machine and index decide, as placement() above.
  CHECK(choose_gpu_transport(GpuTransport::automatic, gpu, true, {{"node0", 0, ""}, {"node0", 0, ""}}).transport ==
        GpuTransport::staged);
}
