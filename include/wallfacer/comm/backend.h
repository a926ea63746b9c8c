#pragma once
// A communication backend over one group of ranks: MPI for CPU tensors, NCCL for GPU tensors.
// Backends move bytes; they do not count traffic or pick themselves — Group (group.h) does.
// Peers and roots are ranks within the group. Buffers are contiguous tensors; collectives
// concatenate / split along dim 0.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"

namespace wf::comm {

enum class ReduceOp { sum, max, avg, min };
const char* reduce_op_name(ReduceOp op);

// A pending non-blocking operation. wait() blocks until it completes (bounded by the watchdog);
// test() returns whether it has completed without blocking.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // Completes the operation as seen from `stream`: once the returned event has completed, what it
  // received is there for `stream`'s work. The default (MPI: the host drives the transfer) waits
  // for it on the host and records the event on `stream` after the work the completion queued
  // there (a staged copy back into a device tensor); a backend that runs on a device stream
  // (NCCL) records on that stream instead, and the host does not wait.
  virtual Event record_event(const Stream& stream) {
    wait();
    Event event;
    event.record(stream);
    return event;
  }
  // Whether it completes on a device stream (record_event needs no host wait), so a consumer
  // should wait with make_wait rather than on the host.
  virtual bool completes_on_device() const { return false; }
};

class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  void wait() {
    if (impl_) impl_->wait();
  }
  bool test() { return !impl_ || impl_->test(); }
  bool valid() const { return impl_ != nullptr; }
  // The operation's completion as an event for `stream` (RequestImpl::record_event); an empty
  // request's is complete.
  Event record_event(const Stream& stream) { return impl_ ? impl_->record_event(stream) : Event(); }
  // Orders `stream`'s later work after the operation (the consumer of a received tensor waits on
  // the device, not the host, where the backend allows it).
  void make_wait(const Stream& stream) { stream.wait(record_event(stream)); }
  bool completes_on_device() const { return impl_ && impl_->completes_on_device(); }

 private:
  std::shared_ptr<RequestImpl> impl_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void send(const Tensor& t, int peer, int tag) = 0;
  virtual void recv(Tensor& t, int peer, int tag) = 0;
  virtual Request isend(const Tensor& t, int peer, int tag) = 0;
  virtual Request irecv(Tensor& t, int peer, int tag) = 0;
  virtual void sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) = 0;
  // sendrecv without waiting: one request for both halves, to overlap a ring step with
  // compute. The default posts irecv then isend and joins the two requests; MPI posts both
  // into one progress-tracked request, NCCL issues them as one group (which, unlike a separate
  // isend / irecv pair, cannot deadlock).
  virtual Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag);

  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // all_reduce without waiting (the gradient all-reduce overlapped with the backward): `t`
  // belongs to the request until it completes and holds the reduction after wait(). Ranks must
  // post their non-blocking collectives of one group in the same order. The default runs the
  // blocking all_reduce and returns a completed request; MPI posts MPI_Iallreduce watched by the
  // progress thread, NCCL enqueues ncclAllReduce on its stream.
  virtual Request iall_reduce(Tensor& t, ReduceOp op);
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // all_gather of pieces with different dim-0 sizes: group rank i contributes rows[i] rows
  // (any may be 0), concatenated in rank order into output [sum(rows), ...]. The default pads
  // every piece to the largest and runs all_gather; MPI overrides it with MPI_Iallgatherv.
  virtual void all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows);
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // reduce_scatter and all_gather without waiting (ZeRO's gradient reduce-scatter during the
  // backward and its parameter all-gather after the step): input and output belong to the
  // request until it completes, and the output holds the result after wait(). Posted in the
  // same order on every rank, like iall_reduce. The defaults run the blocking forms and return
  // a completed request; MPI posts MPI_Ireduce_scatter_block / MPI_Iallgather watched by the
  // progress thread, NCCL enqueues ncclReduceScatter / ncclAllGather on its stream.
  virtual Request ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op);
  virtual Request iall_gather(const Tensor& input, Tensor& output);
  virtual void all_to_all(const Tensor& input, Tensor& output) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
};

}  // namespace wf::comm
