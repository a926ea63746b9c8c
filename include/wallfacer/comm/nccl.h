#pragma once
// The NCCL transport: GPU tensors between ranks on the device's communication stream
// (src/comm/stream_backend.h). Only its factories are public; the class lives in
// src/comm/nccl_backend.h so that nothing outside the library includes the CUDA or NCCL headers.
// docs/communication.md ("NCCL") describes the semantics. Attach a transport to a group with
// Group::set_device_transport; CommGrid::use_device does it for every group of a grid.
#include <memory>

#include "wallfacer/comm/backend.h"

namespace wf::comm {

class Group;

// Whether this build has the NCCL transport (CUDA toolkit and NCCL found at configure time).
bool nccl_available();

// A communicator of its own over the ranks of `group` (same ranks, same order) for tensors on
// cuda:`device_index`: group rank 0's ncclUniqueId is broadcast over the group's MPI backend and
// every rank joins with ncclCommInitRankConfig. Collective over the group. For groups made outside
// a CommGrid, and for tests. Every rank first checks that it can take part (NCCL built, the device
// exists, no two ranks on one GPU), so a failure on one rank is a wf::Error on every rank, naming
// the fix, instead of a hang.
std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index);
// The same, running on `stream` (a stream of cuda:`device_index`) instead of the device's
// communication stream: a link of its own (CommGrid::pipeline_link).
std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index, const Stream& stream);

// The communicator of `group`, split (ncclCommSplit) from the communicator of `world` on
// cuda:`device_index`: `color` says which group of its kind `group` is (as in CommGrid's MPI
// split), its group rank orders it. Collective over `world`: every rank of `world` calls it for
// each kind of group in the same order. The world's communicator is made by make_nccl_backend's
// rules on the first call for that world and device, and kept for the life of the process.
std::shared_ptr<Backend> split_nccl_backend(Group& world, Group& group, int color, int device_index);

}  // namespace wf::comm
