#pragma once
// How device tensors travel between ranks (docs/gpu.md, "Transports").
//
// CPU tensors always go over MPI. A device's tensors take one of two transports per job:
//   - staged: MPI through pinned host copies (src/comm/mpi_backend.cpp). Works everywhere,
//     including ranks that share one GPU (which NCCL refuses), but the host waits for each
//     transfer and every byte crosses PCIe twice;
//   - nccl: the device's own transport on a communication stream of the device
//     (src/comm/stream_backend.h): NCCL on CUDA GPUs; on the test device, its stand-in with
//     NCCL's semantics (MPI run in stream order by the stream's worker), so CI proves on a CPU
//     what the GPU path relies on. The host never waits inside a step.
// `comm.gpu_transport: auto` picks nccl when the build has it and every rank of the job has a GPU
// of its own, staged otherwise; choose_gpu_transport is that rule, with its reason.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/core/device.h"
#include "wallfacer/core/stream.h"

namespace wf::comm {

class Backend;
class Group;

enum class GpuTransport { automatic, nccl, staged };

std::string_view gpu_transport_name(GpuTransport transport);  // "auto", "nccl", "staged" (comm.gpu_transport)

// Where one rank's device is, for "has a GPU of its own": the GPU's UUID where the runtime gives
// one (cuda_device_uuid), which tells GPUs apart even where every rank sees its own as cuda:0
// (CUDA_VISIBLE_DEVICES per rank, as batch schedulers set it); else its machine and index.
struct RankDevice {
  std::string host;
  int device = 0;
  std::string gpu_uuid{};  // empty: unknown
  friend bool operator==(const RankDevice&, const RankDevice&) = default;
};

struct TransportChoice {
  GpuTransport transport = GpuTransport::staged;  // nccl or staged, never automatic
  std::string reason;                             // one line for logs and `info`
};

// The transport for tensors on `device` in a job whose ranks sit on `ranks` (every rank's, in
// world order), given what the build has. Pure: the same answer on every rank. A CPU device needs
// none (staged, "cpu tensors go over MPI"). wf::Error, with the fix, when `requested` is nccl and
// NCCL cannot serve (not built, or two ranks share a GPU: NCCL refuses them).
TransportChoice choose_gpu_transport(GpuTransport requested, Device device, bool nccl_built,
                                     const std::vector<RankDevice>& ranks);

// The test device's stand-in for NCCL over the ranks of `group`: each operation runs on the test
// device's communication stream as MPI on a duplicate of the group's communicator (collective
// over the group), ignoring tags as NCCL does. Attach it with Group::set_device_transport.
std::shared_ptr<Backend> make_test_device_transport(Group& group);
// The same on `stream` (a test-device stream) instead of the device's communication stream.
std::shared_ptr<Backend> make_test_device_transport(Group& group, const Stream& stream);

}  // namespace wf::comm
