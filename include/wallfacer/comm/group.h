#pragma once
// wf::comm::Group: a named set of ranks (e.g. "sp.ring") with one communicator interface.
// Each call picks the backend by the tensor's device (MPI for cpu; for a device, its transport:
// comm/transport.h), checks the
// arguments, counts traffic (traffic.h) under the group's name and runs under the watchdog.
// Peers and roots are group ranks. Collectives concatenate / split along dim 0:
//   all_gather:     input [n, ...] on every rank → output [size·n, ...] (rank order)
//   reduce_scatter: input [size·n, ...] → output [n, ...], this rank's slice of the reduction
//   all_to_all:     input [size·n, ...] → output [size·n, ...]; slice i goes to rank i
//   all_gather_v:   input [n_r, ...] on rank r (n_r may differ, may be 0) → output [Σ n_r, ...]
// bf16 reductions travel in bf16 and widen each combine to f32, rounding once per combine (as
// NCCL does); f16 reductions on the CPU run in an f32 copy.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/comm/backend.h"
#include "wallfacer/comm/traffic.h"

namespace wf::comm {

class Group {
 public:
  // `world_ranks` lists the members by group rank; `cpu` is the MPI backend of these ranks (it
  // also stages device tensors that have no transport of their own: set_device_transport).
  Group(std::string name, std::vector<int> world_ranks, int rank, std::shared_ptr<Backend> cpu);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  TrafficCounters& traffic() const { return *traffic_; }

  void send(const Tensor& t, int peer, int tag = 0);
  void recv(Tensor& t, int peer, int tag = 0);
  Request isend(const Tensor& t, int peer, int tag = 0);
  Request irecv(Tensor& t, int peer, int tag = 0);
  void sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag = 0);
  // sendrecv without waiting (ring attention's step): send to dst and receive from src as one
  // Request, counted like sendrecv (one send and one receive, zero to / from this rank). On
  // the CPU a progress thread moves the data while the caller computes (docs/communication.md);
  // `send` and `recv` belong to the request until it completes.
  Request isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag = 0);

  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  // all_reduce without waiting, with the same checks and traffic (counted when posted); `t`
  // belongs to the request until wait() returns, and then holds the reduction. Every rank must
  // post the group's non-blocking collectives in the same order. On the CPU the progress thread
  // moves it while the caller computes; the wait runs under the watchdog.
  Request iall_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  void all_gather(const Tensor& input, Tensor& output);
  // all_gather without waiting (ZeRO's parameter all-gather after the optimizer step), with
  // all_gather's checks and traffic (counted when posted). Like iall_reduce: input and output
  // belong to the request until wait() returns (then output holds the gathered pieces), the
  // progress thread moves it on the CPU, the wait runs under the watchdog, and every rank must
  // post the group's non-blocking collectives in the same order (they may wait in any order).
  // Views (slice0 / view at a storage offset) work as input and output.
  Request iall_gather(const Tensor& input, Tensor& output);
  // rows[r] = dim-0 size of rank r's piece (the same list on every rank); output [Σ rows, ...].
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows);
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::sum);
  // reduce_scatter without waiting (ZeRO's per-bucket gradient reduce-scatter during the
  // backward), with reduce_scatter's checks, traffic and bf16/f16 handling; otherwise as
  // iall_gather above.
  Request ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::sum);
  void all_to_all(const Tensor& input, Tensor& output);
  void broadcast(Tensor& t, int root);
  void barrier();

  // Convenience forms that allocate the output.
  Tensor all_gather(const Tensor& input);
  Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::sum);
  Tensor all_to_all(const Tensor& input);
  // Learns every rank's dim-0 size first (a small, uncounted all-gather), then all_gather_v.
  Tensor all_gather_v(const Tensor& input);

  // The transport of `transport`'s device's tensors (comm/transport.h): a stream transport (NCCL, or
  // the test device's stand-in) attached by CommGrid::use_device. Tensors of a device without one
  // are staged through pinned host memory over the group's MPI backend.
  void set_device_transport(std::shared_ptr<Backend> transport, Device device);
  // "mpi" for the cpu; the attached transport's name ("nccl", "nccl-testdev"), else "staged".
  std::string transport_name(Device device) const;
  Backend& cpu_backend() const { return *cpu_; }

 private:
  friend Traffic sum_over_ranks(Group& group, const Traffic& traffic);
  Backend& backend_for(const Tensor& t, const char* primitive);
  Backend& backend_for(const Tensor& input, const Tensor& output, const char* primitive);
  // sendrecv / isendrecv: the backend, after checking both peers; then their traffic.
  Backend& exchange_backend(const Tensor& send, int dst, const Tensor& recv, int src, const char* primitive);
  void count_exchange(const Tensor& send, int dst, const Tensor& recv, int src);
  // all_reduce / iall_reduce: the backend after the (agreed) argument checks; then the traffic.
  Backend& reduction_backend(Tensor& t, ReduceOp op, const char* primitive);
  void count_all_reduce(const Tensor& t);
  // all_gather / iall_gather and reduce_scatter / ireduce_scatter: the same, for those two.
  Backend& gather_backend(const Tensor& input, const Tensor& output, const char* primitive);
  void count_all_gather(const Tensor& input);
  Backend& scatter_backend(const Tensor& input, const Tensor& output, ReduceOp op, const char* primitive);
  void count_reduce_scatter(const Tensor& output);
  // Before each collective: the local shape checks are done; this numbers the call and, when
  // argument checks are on, compares it with every other rank's.
  void agree_on_call(const char* primitive, const Tensor* t, std::int64_t detail = -1);
  // agree_on_call after running the collective's local checks. With argument checks on, a
  // local failure is shared in the comparison, so every rank throws the same error at once
  // (instead of the others waiting for the watchdog); with them off it is thrown as is.
  void agree_after_checks(const char* primitive, const std::function<void()>& local_checks, const Tensor* t,
                          std::int64_t detail = -1);
  // The forms that allocate the output check the input first; a failure there joins the full
  // form's argument check on the other ranks (and throws).
  void check_before_allocating(const char* primitive, const std::function<void()>& local_checks);

  std::string name_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  std::shared_ptr<Backend> cpu_, device_transport_;
  Device transport_device_;
  TrafficCounters* traffic_;
  std::int64_t sequence_ = 0;  // collectives called on this group so far, for the argument checks
};

// `traffic` summed over the ranks of `group` (an uncounted all-reduce: every rank must call it).
Traffic sum_over_ranks(Group& group, const Traffic& traffic);

}  // namespace wf::comm
