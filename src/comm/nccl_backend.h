#pragma once
// NcclBackend: wf::comm::Backend over an NCCL communicator, for tensors on one CUDA device.
// Private to the library (it includes the CUDA and NCCL headers); make_nccl_backend in
// wallfacer/comm/nccl.h creates one.
//
// Every operation is enqueued on the backend's own CUDA stream. That stream is created
// blocking, so it is ordered after work on the legacy default stream, where kernels run today;
// when kernels move to streams of their own, the comm stream must wait on an event of theirs.
// Blocking calls return once the stream has finished the operation (as with MPI, the buffers
// are then ready); isend / irecv / isendrecv return a Request backed by a CUDA event.
// Waiting polls the event and NCCL's asynchronous error state. After watchdog_timeout()
// without completion the communicator is aborted (so no kernel stays stuck on the GPU) and, as
// for MPI (src/comm/watchdog.h), the job ends through Runtime::abort with a message naming the
// group, the call and the rank (a wf::Error when no Runtime is initialised). An asynchronous
// NCCL error (a peer failed) aborts the communicator and throws a wf::Error.
//
// NCCL P2P differs from MPI in two ways that callers must know:
//   - there are no tags: messages between two ranks match in the order they were issued;
//   - a send may not complete until the peer has posted the matching receive, and the
//     operations of one rank run one after another on its stream. Two ranks that each isend
//     and then irecv to the other can therefore deadlock once messages exceed NCCL's buffers.
//     Exchanges must use sendrecv / isendrecv, which issue both halves as one NCCL group.
#include "wallfacer/build_info.h"

#ifndef WF_HAVE_NCCL
#define WF_HAVE_NCCL 0  // set to 1 by the NCCL::nccl target (cmake/Dependencies.cmake)
#endif

#if WF_HAVE_CUDA && WF_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/comm/backend.h"

namespace wf::comm {

class Group;

// What the backend and its in-flight requests share: the communicator stays alive (and can be
// aborted by a timed-out wait) until the last request that uses it is gone.
struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::string group;  // the bootstrap group's name, for messages
  int device = 0, rank = 0, size = 1;
  float* scratch = nullptr;  // one element on the device, the buffer of barrier()
  std::atomic<bool> aborted{false};  // after a timeout or an asynchronous NCCL error

  NcclComm() = default;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();
  // Tears the communicator down without waiting for the peers (ncclCommAbort).
  void abort() noexcept;
};

class NcclBackend final : public Backend {
 public:
  // Collective over `bootstrap` (see make_nccl_backend).
  NcclBackend(Group& bootstrap, int device_index);

  std::string name() const override { return "nccl"; }
  int rank() const override { return comm_->rank; }
  int size() const override { return comm_->size; }
  int device_index() const { return comm_->device; }

  void send(const Tensor& t, int peer, int tag) override;
  void recv(Tensor& t, int peer, int tag) override;
  Request isend(const Tensor& t, int peer, int tag) override;
  Request irecv(Tensor& t, int peer, int tag) override;
  void sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) override;
  // Sends to dst and receives from src as one NCCL group, without waiting: the overlap-friendly
  // exchange that cannot deadlock the way an isend / irecv pair can. The Backend form ignores
  // the tag, as all NCCL P2P does.
  Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src);
  Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int /*tag*/) override {
    return isendrecv(send, dst, recv, src);
  }

  void all_reduce(Tensor& t, ReduceOp op) override;
  // ncclAllReduce enqueued on the stream; the Request waits on the event after it.
  Request iall_reduce(Tensor& t, ReduceOp op) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  // ncclAllGather / ncclReduceScatter enqueued on the stream, the request holding input and
  // output until the event after them; the blocking forms are these plus wait().
  Request iall_gather(const Tensor& input, Tensor& output) override;
  Request ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  // One ncclBroadcast per rank inside a group: no padding to the largest piece.
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) override;
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  void all_to_all(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;

 private:
  using Launch = std::function<void(ncclComm_t, cudaStream_t)>;
  // Runs `launch` (NCCL calls on the stream) on this backend's device and records an event
  // after it. The request keeps `buffers` alive until the operation has completed.
  Request enqueue(const char* primitive, const Launch& launch, std::vector<Tensor> buffers);
  // The blocking form: enqueue, then wait under the watchdog.
  void run(const char* primitive, const Launch& launch) { enqueue(primitive, launch, {}).wait(); }
  void check_peer(const char* primitive, int peer) const;

  std::shared_ptr<NcclComm> comm_;
};

}  // namespace wf::comm

#endif  // WF_HAVE_CUDA && WF_HAVE_NCCL
