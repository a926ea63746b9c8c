// CommGrid: one Group per named group of a ProcessGrid. The grid already knows every rank list,
// so each kind of group is one MPI_Comm_split over the world: color = which group of that kind
// (its index among all of them), key = the rank's position inside it.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/core/cuda_info.h"
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
    if (kind == "pp" && grid_.group(kind).size() > 1) make_pipeline_edges(color);
    groups_.emplace(std::string(kind), std::move(group));
    colors_.emplace(std::string(kind), color);
  }
}

namespace {

// Every rank's machine and device, in world order (an all-gather of fixed-size records).
std::vector<RankDevice> gather_rank_devices(Group& world, Device device) {
  // One fixed-size record per rank: host name, device index, GPU UUID (NUL-padded).
  constexpr std::int64_t kHostBytes = 256, kUuidBytes = 64, kRecord = kHostBytes + 4 + kUuidBytes;
  Tensor mine = Tensor::zeros({1, kRecord}, DType::u8);
  auto* bytes = static_cast<char*>(mine.raw_data());
  gethostname(bytes, kHostBytes - 1);
  const std::int32_t index = device.index;
  std::memcpy(bytes + kHostBytes, &index, sizeof index);
  const std::string uuid = device.is_cuda() ? cuda_device_uuid(device.index) : std::string();
  std::memcpy(bytes + kHostBytes + 4, uuid.data(), std::min<std::size_t>(uuid.size(), kUuidBytes - 1));
  // On the MPI backend itself: a setup exchange, not the program's traffic (traffic.h).
  Tensor all = Tensor::empty({world.size(), kRecord}, DType::u8);
  world.cpu_backend().all_gather(mine, all);
  std::vector<RankDevice> ranks;
  const auto* gathered = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < world.size(); ++r) {
    const char* record = gathered + r * kRecord;
    std::int32_t gpu = 0;
    std::memcpy(&gpu, record + kHostBytes, sizeof gpu);
    ranks.push_back({std::string(record, strnlen(record, kHostBytes)), gpu,
                     std::string(record + kHostBytes + 4, strnlen(record + kHostBytes + 4, kUuidBytes))});
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
    if (own_transport && device.is_test()) transport = make_test_device_transport(g);
    // Split from the world's NCCL communicator, with the color of this kind's MPI split.
    if (own_transport && device.is_cuda()) {
      transport = split_nccl_backend(world, g, colors_.find(kind)->second, device.index);
    }
    g.set_device_transport(std::move(transport), device);
  }
  // Each pipeline edge on a stream of its own (pipeline_link says why), collective over its two
  // ranks, in the order of make_pipeline_edges.
  for (Edge& e : edges_) {
    std::shared_ptr<Backend> transport;
    if (own_transport && device.is_test()) transport = make_test_device_transport(*e.group, Stream::create(device));
    if (own_transport && device.is_cuda()) {
      transport = make_nccl_backend(*e.group, device.index, Stream::create(device));
    }
    e.group->set_device_transport(std::move(transport), device);
  }
  return transport_;
}

// The directed edges r -> r +- 1 (mod P) of the pp ring, one group of two per edge, made with world
// splits in which every rank is in at most one edge: edges alternate between two splits by the
// sender's parity, and the wrap edge of an odd ring takes a third. Every rank makes the same
// splits in the same order (collective over the world), and creates transports on them in that
// order (use_device), so each split's disjoint pairs never wait on each other.
void CommGrid::make_pipeline_edges(int pp_color) {
  Runtime& runtime = Runtime::get();
  const int P = grid_.group("pp").size(), r = grid_.group_rank("pp");
  const auto split_of = [P](int sender) { return P % 2 == 1 && sender == P - 1 ? 2 : sender % 2; };
  for (const PipelineLink link : {PipelineLink::activations, PipelineLink::gradients}) {
    const int step = link == PipelineLink::activations ? 1 : P - 1;  // to the next stage, or the previous
    const int from = (r + P - step) % P;                           // the sender of the edge r receives on
    for (int split = 0; split < (P % 2 == 1 ? 3 : 2); ++split) {
      int color = -1, key = 0;
      bool sending = false;
      if (split_of(r) == split) {
        color = pp_color * P + r, key = 0, sending = true;
      } else if (split_of(from) == split) {
        color = pp_color * P + from, key = 1;
      }
      std::shared_ptr<Group> edge = runtime.split("pp", color, key);
      if (edge) edges_.push_back({link, sending, std::move(edge)});
    }
  }
}

Group& CommGrid::pipeline_link(PipelineLink link, bool sending) {
  for (Edge& e : edges_) {
    if (e.link == link && e.sending == sending) return *e.group;
  }
  WF_FAIL("CommGrid: no pipeline link here (pp = {}): a pipeline needs parallel.pp > 1", grid_.group("pp").size());
}

Group& CommGrid::group(std::string_view name) {
  const auto it = groups_.find(name);
  WF_CHECK(it != groups_.end(), "CommGrid: no group named '{}'; the groups are {}", name,
           fmt::join(ProcessGrid::group_names(), ", "));
  return *it->second;
}

}  // namespace wf::comm
