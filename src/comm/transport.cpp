// Which transport device tensors take (transport.h): the names, and the rule `auto` follows.
#include "wallfacer/comm/transport.h"

#include <fmt/format.h>

#include <set>

#include "wallfacer/core/error.h"

namespace wf::comm {

std::string_view gpu_transport_name(GpuTransport transport) {
  switch (transport) {
    case GpuTransport::automatic: return "auto";
    case GpuTransport::nccl: return "nccl";
    case GpuTransport::staged: return "staged";
  }
  return "unknown";
}

TransportChoice choose_gpu_transport(GpuTransport requested, Device device, bool nccl_built,
                                     const std::vector<RankDevice>& ranks) {
  if (device.is_cpu()) return {GpuTransport::staged, "cpu tensors go over MPI"};
  if (requested == GpuTransport::staged) {
    return {GpuTransport::staged, "comm.gpu_transport is staged: MPI through pinned host memory"};
  }
  // The test device's stand-in serves any placement: it is MPI underneath.
  if (device.is_test()) {
    return {GpuTransport::nccl, "the test device's stand-in for NCCL (MPI on its communication stream)"};
  }
  // A world of one moves nothing between ranks: auto creates no communicators (a one-GPU run then
  // needs nothing of NCCL), while an explicit nccl is honoured (the NCCL tests' world of one).
  if (requested == GpuTransport::automatic && ranks.size() <= 1) {
    return {GpuTransport::staged, "staged: a world of one, nothing travels between ranks"};
  }
  std::string problem;
  if (!nccl_built) {
    problem = "this build has no NCCL (configure with the CUDA toolkit and NCCL installed)";
  } else {
    std::set<std::string> seen;  // each rank's GPU: its UUID, else its machine and index
    for (std::size_t r = 0; r < ranks.size() && problem.empty(); ++r) {
      const RankDevice& d = ranks[r];
      if (!seen.insert(d.gpu_uuid.empty() ? fmt::format("{}:{}", d.host, d.device) : d.gpu_uuid).second) {
        problem = fmt::format("ranks share a GPU (world rank {} is on cuda:{}{} of {}, as an earlier rank is), "
                              "which NCCL refuses; give each rank a GPU of its own",
                              r, d.device, d.gpu_uuid.empty() ? "" : " " + d.gpu_uuid, d.host);
      }
    }
  }
  if (problem.empty()) return {GpuTransport::nccl, "nccl: every rank has a GPU of its own"};
  WF_USER_CHECK(requested == GpuTransport::automatic,
                "comm.gpu_transport is nccl, but {}; set comm.gpu_transport: staged (or auto) to move GPU tensors "
                "through pinned host memory over MPI",
                problem);
  return {GpuTransport::staged, fmt::format("staged (MPI through pinned host memory): {}", problem)};
}

}  // namespace wf::comm
