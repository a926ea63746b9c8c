// CommGrid: one Group per named group of a ProcessGrid. The grid already knows every rank list,
// so each kind of group is one MPI_Comm_split over the world: color = which group of that kind
// (its index among all of them), key = the rank's position inside it.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/core/error.h"

namespace wf::comm {

CommGrid::CommGrid(const ProcessGrid& grid) : grid_(grid) {
  Runtime& runtime = Runtime::get();
  // A grid of one rank in a larger job is process-local: every process gets groups of itself
  // alone (a test comparing a parallel run with a single-process one in the same job).
  const bool local = grid_.world_size() == 1;
  WF_CHECK(local || (grid_.world_size() == runtime.world_size() && grid_.rank() == runtime.rank()),
           "CommGrid: the process grid is for rank {} of {}, but this process is rank {} of {}", grid_.rank(),
           grid_.world_size(), runtime.rank(), runtime.world_size());
  for (std::string_view kind : ProcessGrid::group_names()) {
    const std::vector<std::vector<int>> all = grid_.all_groups(kind);
    const std::vector<int>& mine = local ? std::vector<int>{runtime.rank()} : grid_.group(kind);
    const int color = local ? runtime.rank() : static_cast<int>(std::find(all.begin(), all.end(), mine) - all.begin());
    std::shared_ptr<Group> group = runtime.split(std::string(kind), color, grid_.group_rank(kind));
    WF_CHECK(group != nullptr && group->world_ranks() == mine,
             "CommGrid: MPI built group '{}' with world ranks [{}], but the process grid says [{}]", kind,
             group ? fmt::format("{}", fmt::join(group->world_ranks(), ", ")) : std::string("none"),
             fmt::join(mine, ", "));
    groups_.emplace(std::string(kind), std::move(group));
    colors_.emplace(std::string(kind), color);
  }
}

namespace {

// Every rank's machine and device, in world order (an all-gather of fixed-size records).
std::vector<RankDevice> gather_rank_devices(Group& world, Device device) {
  constexpr std::int64_t kHostBytes = 256;
  Tensor mine = Tensor::zeros({1, kHostBytes + 4}, DType::u8);
  auto* bytes = static_cast<char*>(mine.raw_data());
  gethostname(bytes, kHostBytes - 1);
  const std::int32_t index = device.index;
  std::memcpy(bytes + kHostBytes, &index, sizeof index);
  // On the MPI backend itself: a setup exchange, not the program's traffic (traffic.h).
  Tensor all = Tensor::empty({world.size(), kHostBytes + 4}, DType::u8);
  world.cpu_backend().all_gather(mine, all);
  std::vector<RankDevice> ranks;
  const auto* gathered = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < world.size(); ++r) {
    const char* record = gathered + r * (kHostBytes + 4);
    std::int32_t gpu = 0;
    std::memcpy(&gpu, record + kHostBytes, sizeof gpu);
    ranks.push_back({std::string(record, strnlen(record, kHostBytes)), gpu});
  }
  return ranks;
}

}  // namespace

TransportChoice CommGrid::use_device(Device device, GpuTransport requested) {
  Group& world = group("world");
  transport_ = choose_gpu_transport(requested, device, nccl_available(), gather_rank_devices(world, device));
  const bool own_transport = transport_.transport == GpuTransport::nccl;
  for (std::string_view kind : ProcessGrid::group_names()) {
    Group& g = group(kind);
    std::shared_ptr<Backend> transport;
    // The pipeline's stage-to-stage messages stay staged: PipelineRunner posts each receive ahead
    // as a tagged irecv apart from its send, which MPI matches by tag but a transport that runs a
    // rank's operations in order (NCCL) could deadlock on. Its collectives' groups take the device's.
    // (Every rank skips the same kind, so the world's splits stay collective.)
    const bool stream_ordered = own_transport && kind != "pp";
    if (stream_ordered && device.is_test()) transport = make_test_device_transport(g);
    // Split from the world's NCCL communicator, with the color of this kind's MPI split.
    if (stream_ordered && device.is_cuda()) {
      transport = split_nccl_backend(world, g, colors_.find(kind)->second, device.index);
    }
    g.set_device_transport(std::move(transport), device);
  }
  return transport_;
}

Group& CommGrid::group(std::string_view name) {
  const auto it = groups_.find(name);
  WF_CHECK(it != groups_.end(), "CommGrid: no group named '{}'; the groups are {}", name,
           fmt::join(ProcessGrid::group_names(), ", "));
  return *it->second;
}

}  // namespace wf::comm
