#pragma once
// StreamBackend: a Backend whose operations run on a device's communication stream: NCCL on
// GPUs (nccl_backend.h) and its stand-in on the test device (test_device_transport.cpp). What
// every such transport shares lives here, so that each one only says how to issue an operation:
//
//   - One communication stream per device (comm_stream), shared by every group's backend: the
//     operations of all groups run in the order this rank issued them.
//   - Ordering without the host: an operation first makes the comm stream wait for the work
//     queued so far on the caller's current stream (what produced the data it sends, what last
//     read the buffer it receives into); its Request's event is what a consumer stream waits on
//     (Request::make_wait).
//   - "Blocking" calls (send, recv, sendrecv, all_reduce, all_gather, ...) return once the caller's
//     current stream waits for the operation; the host does not wait for it.
//   - The tensors an operation uses stay alive until it has run (kept in a list pruned at each
//     operation), whichever stream later frees them.
//   - Request::wait() is a host wait (one host synchronisation) under the watchdog: it polls the
//     operation's event and the transport's asynchronous error state, and after WF_COMM_TIMEOUT
//     aborts the transport and ends the job with the watchdog's message.
//
// NCCL's semantics, which the test device's transport reproduces so that CI catches code that
// relies on MPI's: there are no tags (messages between two ranks match in the order they were
// issued), and a rank's operations run one after another, so a send may wait until its receiver
// reaches the matching receive. An exchange must therefore be one sendrecv / isendrecv (one
// group), never an isend and an irecv issued apart; all_to_all and all_gather_v are grouped
// sends and receives here.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "wallfacer/comm/backend.h"
#include "wallfacer/core/stream.h"

namespace wf::comm {

// The communication stream of `device`: created on first use, one per device per process.
Stream comm_stream(Device device);

class StreamBackend : public Backend, public std::enable_shared_from_this<StreamBackend> {
 public:
  // Runs on `stream`: normally comm_stream(device); a stream of its own for a link that must not
  // queue behind the other groups' operations (the pipeline's links: CommGrid::pipeline_link).
  StreamBackend(std::string group_name, int rank, int size, Device device, Stream stream);
  ~StreamBackend() override;
  StreamBackend(const StreamBackend&) = delete;
  StreamBackend& operator=(const StreamBackend&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const { return device_; }
  const Stream& stream() const { return stream_; }
  const std::string& group_name() const { return group_name_; }

  void send(const Tensor& t, int peer, int tag) override;
  void recv(Tensor& t, int peer, int tag) override;
  Request isend(const Tensor& t, int peer, int tag) override;
  Request irecv(Tensor& t, int peer, int tag) override;
  void sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) override;
  Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  Request iall_reduce(Tensor& t, ReduceOp op) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  Request iall_gather(const Tensor& input, Tensor& output) override;
  // Every rank's piece to every other, as one group of sends and receives (no padding).
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) override;
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  Request ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  // Slice p to rank p and slice p from rank p, as one group of sends and receives.
  void all_to_all(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& t, int root) override;
  // An all-reduce of one element, then a host wait: every rank has reached it and this rank's
  // comm stream has run everything before it.
  void barrier() override;

  // Called by the requests: the transport's asynchronous error (wf::Error), and its teardown.
  void raise_async_error() { check_async_error(); }
  void abort_transport() noexcept { abort(); }

 protected:
  // One leg of a group of point-to-point operations.
  struct P2p {
    Tensor buffer;
    int peer = 0;
    bool receive = false;
  };
  // Issue the operation on `comm` (this backend's device's comm stream), which already waits for
  // the caller's work; the buffers are tensors on device() (every tensor is contiguous).
  virtual void issue_p2p(const Stream& comm, const std::vector<P2p>& legs) = 0;  // one group
  // How the caller posted a collective. NCCL runs both forms alike; the test device's transport
  // runs MPI's matching form (the blocking and non-blocking collectives may sum in different
  // orders at 3+ ranks), so its results are the bits of the same call on CPU tensors.
  enum class Form { blocking, nonblocking };
  virtual void issue_all_reduce(const Stream& comm, const Tensor& t, ReduceOp op, Form form) = 0;
  virtual void issue_all_gather(const Stream& comm, const Tensor& input, const Tensor& output, Form form) = 0;
  virtual void issue_reduce_scatter(const Stream& comm, const Tensor& input, const Tensor& output, ReduceOp op,
                                    Form form) = 0;
  virtual void issue_broadcast(const Stream& comm, const Tensor& t, int root) = 0;
  // Throws a wf::Error for an error the transport recorded asynchronously (a peer failed).
  virtual void check_async_error() {}
  // Tears the transport down without waiting for the peers (a timed-out wait); never throws.
  virtual void abort() noexcept {}

 private:
  using Issue = std::function<void(const Stream&)>;
  // Orders the comm stream after the caller's current stream, issues, records the completion
  // event, keeps `buffers` until it has passed, and returns the request.
  Request enqueue(const char* primitive, std::vector<Tensor> buffers, const Issue& issue);
  // The blocking forms: the caller's current stream waits for `request` (the host does not).
  void wait_on_device(Request request) const;
  void check_buffer(const Tensor& t, const char* primitive) const;
  void check_peer(int peer, const char* primitive) const;
  std::vector<P2p> all_to_all_legs(const Tensor& input, const Tensor& output) const;
  Request post_all_reduce(Tensor& t, ReduceOp op, Form form);
  Request post_all_gather(const Tensor& input, Tensor& output, Form form);
  Request post_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, Form form);

  struct InFlight {
    Event done;
    std::vector<Tensor> buffers;
  };
  std::string group_name_;
  int rank_ = 0, size_ = 1;
  Device device_;
  Stream stream_;
  std::mutex in_flight_mutex_;
  std::vector<InFlight> in_flight_;
};

}  // namespace wf::comm
