#pragma once
// The MPI backend: moves CPU tensors over one MPI communicator. Point-to-point calls post
// non-blocking MPI operations and complete them through the watchdog's polling wait; blocking
// collectives call MPI's blocking collectives while the watchdog's monitor thread watches the
// deadline (watchdog.h). Either way a hang becomes a job abort with a message. Internal to
// src/comm: nothing outside sees mpi.h.
// The requests isend / irecv / isendrecv / iall_reduce / ireduce_scatter / iall_gather hand back
// are also watched by the progress thread (progress.h), so they move while the caller computes.
//
// bf16 and f16 reductions: MPI has no 16-bit float types, so the tensor is converted to an f32
// buffer, reduced with MPI_FLOAT and rounded back once at the end (one rounding instead of one
// per rank). Everything that only moves data goes as MPI_BYTE, whatever the dtype.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/mpi_util.h"
#include "src/comm/watchdog.h"
#include "wallfacer/comm/backend.h"

namespace wf::comm {

// One side of a posted P2P operation: the tensor (held so its storage outlives the transfer),
// the peer, and the direction.
struct P2pLeg {
  Tensor buffer;
  int peer = 0;
  bool receive = false;
};

class MpiBackend final : public Backend, public std::enable_shared_from_this<MpiBackend> {
 public:
  // Takes ownership of `comm` (freed by the destructor while MPI is still running) and sets
  // MPI_ERRORS_RETURN on it. `group_name` is only for messages.
  MpiBackend(MPI_Comm comm, std::string group_name);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }

  void send(const Tensor& t, int peer, int tag) override;
  void recv(Tensor& t, int peer, int tag) override;
  Request isend(const Tensor& t, int peer, int tag) override;
  Request irecv(Tensor& t, int peer, int tag) override;
  void sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) override;
  // One request over an MPI_Irecv and an MPI_Isend, watched by the progress thread.
  Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) override;

  void all_reduce(Tensor& t, ReduceOp op) override;
  // MPI_Iallreduce as a Request watched by the progress thread; all_reduce is it plus a wait.
  Request iall_reduce(Tensor& t, ReduceOp op) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) override;
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  // MPI_Ireduce_scatter_block / MPI_Iallgather as Requests watched by the progress thread. The
  // blocking forms stay MPI's blocking (tuned) collectives, so their f32 sums may round in
  // another order than these at more than two ranks.
  Request ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  Request iall_gather(const Tensor& input, Tensor& output) override;
  void all_to_all(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& t, int root) override;
  void barrier() override;

  CallSite site(const char* primitive) const { return {group_name_, primitive, rank_, size_}; }
  // "all_reduce on group 'tp'": the prefix of every message about a call.
  std::string context(const char* primitive) const;
  // MPI's `int` counts: wf::Error naming the call when `count` does not fit.
  int to_count(std::int64_t count, const char* primitive) const;
  // Runs a blocking MPI collective under the watchdog's monitor thread (watchdog.h). Blocking
  // collectives are Open MPI's tuned algorithms and its own wait loop; the non-blocking forms
  // (libnbc) plus a test loop were ~30 % slower at 1 MiB, and yielding in that loop lost whole
  // time slices on a loaded machine (docs/communication.md, "Blocking collectives").
  void blocking(const char* primitive, const std::function<int()>& call) const;
  // Checks a completed receive: the MPI error (truncation named as such) and the byte count.
  void verify_receive(const MPI_Status& status, const Tensor& buffer, int peer, const char* primitive) const;

 private:
  // Posts every leg (one request each) as one Request. `overlapped`: the caller gets the
  // request back to compute meanwhile, so the progress thread watches it (progress.h).
  Request start(std::vector<P2pLeg> legs, int tag, const char* primitive, bool overlapped);
  MPI_Request post(const P2pLeg& leg, int tag, const char* primitive);
  // A non-blocking collective: `post` starts it into the MPI_Request it is given; the Request
  // returned is watched by the progress thread and, once MPI completed it, checks its outcome
  // and runs `finish` (a reduction's copy back). `finish` also holds the buffers MPI uses.
  Request start_collective(const char* primitive, const std::function<int(MPI_Request*)>& post,
                           std::function<void()> finish);
  Request start_p2p(const Tensor& t, int peer, int tag, bool receive, const char* primitive, bool overlapped);
  void check_peer_tag(int peer, int tag, const char* primitive) const;

  MPI_Comm comm_;
  std::string group_name_;
  int rank_ = 0, size_ = 1;
  int tag_upper_bound_ = 32767;
};

}  // namespace wf::comm
