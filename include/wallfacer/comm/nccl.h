#pragma once
// The NCCL backend: collectives and P2P between GPU tensors. The only public part is its
// factory; the class lives in src/comm/nccl_backend.h so that nothing outside the library
// includes the CUDA or NCCL headers. docs/communication.md ("NCCL") describes the semantics.
#include <memory>

#include "wallfacer/comm/backend.h"

namespace wf::comm {

class Group;

// Whether this build has the NCCL backend (CUDA toolkit and NCCL found at configure time).
bool nccl_available();

// Creates an NCCL communicator over the ranks of `cpu_group_for_bootstrap`, with the same
// ranks and order, whose tensors live on cuda:`device_index`. Collective over the group: group
// rank 0 creates the ncclUniqueId and broadcasts it with the group's CPU (MPI) backend, then
// every rank joins with ncclCommInitRank. A rank that cannot take part (bad device index, no
// driver) makes every rank throw the same wf::Error instead of leaving the others waiting.
// Throws wf::Error in builds without CUDA or NCCL.
std::shared_ptr<Backend> make_nccl_backend(Group& cpu_group_for_bootstrap, int device_index);

}  // namespace wf::comm
