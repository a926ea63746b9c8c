#include "wallfacer/comm/group.h"

#include <numeric>
#include <utility>

#include "src/comm/call_check.h"
#include "src/comm/watchdog.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"

namespace wf::comm {
namespace {

std::int64_t bytes_of(const Tensor& t) { return static_cast<std::int64_t>(t.nbytes()); }

Shape with_dim0(Shape shape, std::int64_t rows) {
  shape[0] = rows;
  return shape;
}

bool reducible(DType dtype) { return dtype != DType::u8; }

}  // namespace

Group::Group(std::string name, std::vector<int> world_ranks, int rank, std::shared_ptr<Backend> cpu)
    : name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      rank_(rank),
      cpu_(std::move(cpu)),
      traffic_(&TrafficRegistry::instance().counters(name_)) {
  WF_CHECK(!world_ranks_.empty(), "group '{}' has no members", name_);
  WF_CHECK(rank_ >= 0 && rank_ < size(), "group '{}': rank {} is outside [0, {})", name_, rank_, size());
  WF_CHECK(cpu_ != nullptr, "group '{}' needs a CPU backend", name_);
  WF_CHECK(cpu_->size() == size() && cpu_->rank() == rank_,
           "group '{}': the {} backend has rank {} of {}, but the group lists rank {} of {}", name_, cpu_->name(),
           cpu_->rank(), cpu_->size(), rank_, size());
}

void Group::set_device_transport(std::shared_ptr<Backend> transport, Device device) {
  WF_CHECK(transport == nullptr || (transport->size() == size() && transport->rank() == rank_),
           "group '{}': the {} transport has rank {} of {}, but the group lists rank {} of {}", name_,
           transport->name(), transport->rank(), transport->size(), rank_, size());
  device_transport_ = std::move(transport);
  transport_device_ = device;
}

std::string Group::transport_name(Device device) const {
  if (device.is_cpu()) return cpu_->name();
  return device_transport_ && transport_device_ == device ? device_transport_->name() : "staged";
}

Backend& Group::backend_for(const Tensor& t, const char* primitive) {
  WF_CHECK(t.defined(), "{} on group '{}': the tensor is undefined", primitive, name_);
  if (device_transport_ && t.device() == transport_device_) return *device_transport_;
  // The CPU's tensors, and a device's without a transport of its own: MPI stages those through
  // pinned host memory (mpi_backend.cpp).
  return *cpu_;
}

Backend& Group::backend_for(const Tensor& input, const Tensor& output, const char* primitive) {
  WF_CHECK(output.defined(), "{} on group '{}': the output tensor is undefined", primitive, name_);
  Backend& backend = backend_for(input, primitive);
  WF_CHECK(input.device() == output.device(), "{} on group '{}': the input is on {} but the output on {}", primitive,
           name_, input.device().str(), output.device().str());
  return backend;
}

void Group::agree_on_call(const char* primitive, const Tensor* t, std::int64_t detail) {
  agree_after_checks(primitive, nullptr, t, detail);
}

void Group::agree_after_checks(const char* primitive, const std::function<void()>& local_checks, const Tensor* t,
                               std::int64_t detail) {
  std::exception_ptr failure;
  std::string message;
  try {
    if (local_checks) local_checks();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    message = *e.what() != '\0' ? e.what() : "(an error without a message)";
  }
  const bool agree = size() > 1 && argument_checks_enabled();
  if (failure && !agree) std::rethrow_exception(failure);  // as before: this rank alone throws
  const std::int64_t sequence = sequence_++;
  if (!agree) return;
  CallSignature call{primitive};
  if (failure) {
    call.local_error = &message;
  } else if (t != nullptr) {
    call.dtype = t->dtype();
    call.shape = &t->shape();
  }
  call.detail = detail;
  check_call_agreement(*cpu_, name_, sequence, call);
}

void Group::check_before_allocating(const char* primitive, const std::function<void()>& local_checks) {
  try {
    local_checks();
  } catch (const std::exception&) {
    // Meets the other ranks in the full form's argument check, which then fails on all of them.
    agree_after_checks(primitive, [failure = std::current_exception()] { std::rethrow_exception(failure); }, nullptr);
  }
}

// ---- point to point ---------------------------------------------------------------------
// A message to or from this rank itself is counted as zero (traffic.h).
namespace {
void check_peer(const Group& g, int peer, const char* primitive, const char* role) {
  WF_CHECK(peer >= 0 && peer < g.size(), "{} on group '{}': {} {} is not a rank of this group of {} (ranks 0..{})",
           primitive, g.name(), role, peer, g.size(), g.size() - 1);
}
}  // namespace

void Group::send(const Tensor& t, int peer, int tag) {
  Backend& backend = backend_for(t, "send");
  check_peer(*this, peer, "send", "destination");
  backend.send(t, peer, tag);
  traffic_->record(Primitive::send, peer == rank_ ? 0 : bytes_of(t), 0);
}

void Group::recv(Tensor& t, int peer, int tag) {
  Backend& backend = backend_for(t, "recv");
  check_peer(*this, peer, "recv", "source");
  backend.recv(t, peer, tag);
  traffic_->record(Primitive::recv, 0, peer == rank_ ? 0 : bytes_of(t));
}

Request Group::isend(const Tensor& t, int peer, int tag) {
  Backend& backend = backend_for(t, "isend");
  check_peer(*this, peer, "isend", "destination");
  Request request = backend.isend(t, peer, tag);
  traffic_->record(Primitive::send, peer == rank_ ? 0 : bytes_of(t), 0);
  return request;
}

Request Group::irecv(Tensor& t, int peer, int tag) {
  Backend& backend = backend_for(t, "irecv");
  check_peer(*this, peer, "irecv", "source");
  Request request = backend.irecv(t, peer, tag);
  traffic_->record(Primitive::recv, 0, peer == rank_ ? 0 : bytes_of(t));
  return request;
}

Backend& Group::exchange_backend(const Tensor& send, int dst, const Tensor& recv, int src, const char* primitive) {
  Backend& backend = backend_for(send, recv, primitive);
  check_peer(*this, dst, primitive, "destination");
  check_peer(*this, src, primitive, "source");
  return backend;
}

void Group::count_exchange(const Tensor& send, int dst, const Tensor& recv, int src) {
  traffic_->record(Primitive::send, dst == rank_ ? 0 : bytes_of(send), 0);
  traffic_->record(Primitive::recv, 0, src == rank_ ? 0 : bytes_of(recv));
}

void Group::sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  exchange_backend(send, dst, recv, src, "sendrecv").sendrecv(send, dst, recv, src, tag);
  count_exchange(send, dst, recv, src);
}

Request Group::isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  Request request = exchange_backend(send, dst, recv, src, "isendrecv").isendrecv(send, dst, recv, src, tag);
  count_exchange(send, dst, recv, src);
  return request;
}

// ---- collectives ------------------------------------------------------------------------
// Volumes follow traffic.h for a group of C ranks; all_reduce's 2(C−1)/C·S is rounded down to
// whole bytes when C does not divide it. Sizes are the tensors' own: bf16 travels as bf16 (MPI's
// bf16 ops and NCCL widen each combine to f32); an f16 reduction, or a bf16 avg, counts its own
// bytes although MPI moves an f32 copy.
namespace {
void check_reduction(const Group& g, const char* primitive, DType dtype, ReduceOp op) {
  WF_CHECK(reducible(dtype), "{} on group '{}': dtype {} cannot be reduced; use f32, f64, bf16, f16, i32 or i64",
           primitive, g.name(), dtype_name(dtype));
  WF_CHECK(op != ReduceOp::avg || is_floating(dtype),
           "{} on group '{}': avg of an integer tensor ({}) would truncate; reduce with sum and divide, or convert "
           "to a floating dtype first",
           primitive, g.name(), dtype_name(dtype));
}

void check_has_rows(const Group& g, const char* primitive, const Tensor& input) {
  WF_CHECK(input.defined(), "{} on group '{}': the input tensor is undefined", primitive, g.name());
  WF_CHECK(input.dim() >= 1,
           "{} on group '{}': collectives split and concatenate along dim 0, so the input needs at least one "
           "dimension (got a scalar; view it as [1])",
           primitive, g.name());
}

void check_output(const Group& g, const char* primitive, const Tensor& input, const Tensor& output,
                  const Shape& expected) {
  WF_CHECK(output.dtype() == input.dtype() && output.shape() == expected,
           "{} on group '{}' of {} ranks: for input {} {} the output must be {} {}, got {} {}", primitive, g.name(),
           g.size(), dtype_name(input.dtype()), shape_str(input.shape()), dtype_name(input.dtype()),
           shape_str(expected), dtype_name(output.dtype()), shape_str(output.shape()));
}

void check_divisible_rows(const Group& g, const char* primitive, const Tensor& input) {
  check_has_rows(g, primitive, input);
  WF_CHECK(input.size(0) % g.size() == 0,
           "{} on group '{}': input dim 0 ({}, shape {}) must be divisible by the group size {}", primitive, g.name(),
           input.size(0), shape_str(input.shape()), g.size());
}
}  // namespace

// Each collective runs its local checks inside agree_after_checks, so that with argument checks
// on a failure on some ranks fails every rank at once.
// The argument check compares iall_reduce as all_reduce (the call checks know one reduction).
Backend& Group::reduction_backend(Tensor& t, ReduceOp op, const char* primitive) {
  Backend* backend = nullptr;
  agree_after_checks(
      "all_reduce",
      [&] {
        backend = &backend_for(t, primitive);
        check_reduction(*this, primitive, t.dtype(), op);
      },
      &t, static_cast<std::int64_t>(op));
  return *backend;
}

void Group::count_all_reduce(const Tensor& t) {
  const std::int64_t bytes = 2 * (size() - 1) * bytes_of(t) / size();
  traffic_->record(Primitive::all_reduce, bytes, bytes);
}

void Group::all_reduce(Tensor& t, ReduceOp op) {
  reduction_backend(t, op, "all_reduce").all_reduce(t, op);
  count_all_reduce(t);
}

// Counted when posted, like isendrecv: the bytes are committed to the wire from here on.
Request Group::iall_reduce(Tensor& t, ReduceOp op) {
  Request request = reduction_backend(t, op, "iall_reduce").iall_reduce(t, op);
  count_all_reduce(t);
  return request;
}

// all_gather / iall_gather (compared across ranks as an all_gather, like iall_reduce as an
// all_reduce): the backend after the agreed checks; then the traffic, (C−1)/C of the output.
Backend& Group::gather_backend(const Tensor& input, const Tensor& output, const char* primitive) {
  Backend* backend = nullptr;
  agree_after_checks(
      "all_gather",
      [&] {
        backend = &backend_for(input, output, primitive);
        check_has_rows(*this, primitive, input);
        check_output(*this, primitive, input, output, with_dim0(input.shape(), size() * input.size(0)));
      },
      &input);
  return *backend;
}

void Group::count_all_gather(const Tensor& input) {
  const std::int64_t bytes = (size() - 1) * bytes_of(input);
  traffic_->record(Primitive::all_gather, bytes, bytes);
}

void Group::all_gather(const Tensor& input, Tensor& output) {
  gather_backend(input, output, "all_gather").all_gather(input, output);
  count_all_gather(input);
}

// Counted when posted, like iall_reduce.
Request Group::iall_gather(const Tensor& input, Tensor& output) {
  Request request = gather_backend(input, output, "iall_gather").iall_gather(input, output);
  count_all_gather(input);
  return request;
}

// Counted under all_gather: this rank sends its piece to the C−1 others and receives theirs —
// with equal pieces, the (C−1)/C·S of all_gather both ways.
void Group::all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) {
  Backend* backend = nullptr;
  agree_after_checks(
      "all_gather_v",
      [&] {
        backend = &backend_for(input, output, "all_gather_v");
        check_has_rows(*this, "all_gather_v", input);
        WF_CHECK(static_cast<int>(rows.size()) == size(), "all_gather_v on group '{}': {} row counts for {} ranks",
                 name_, rows.size(), size());
        for (std::int64_t r : rows) {
          WF_CHECK(r >= 0, "all_gather_v on group '{}': negative row count {} in [{}]", name_, r,
                   fmt::join(rows, ", "));
        }
        WF_CHECK(rows[static_cast<std::size_t>(rank_)] == input.size(0),
                 "all_gather_v on group '{}': row counts [{}] give this rank ({}) {} rows, but its input {} has {}",
                 name_, fmt::join(rows, ", "), rank_, rows[static_cast<std::size_t>(rank_)], shape_str(input.shape()),
                 input.size(0));
        const std::int64_t total_rows = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
        check_output(*this, "all_gather_v", input, output, with_dim0(input.shape(), total_rows));
      },
      &input, static_cast<std::int64_t>(hash_values(rows.data(), rows.size())));
  backend->all_gather_v(input, output, rows);
  traffic_->record(Primitive::all_gather, (size() - 1) * bytes_of(input), bytes_of(output) - bytes_of(input));
}

// reduce_scatter / ireduce_scatter, compared across ranks as a reduce_scatter; the traffic is
// (C−1)/C of the input, i.e. C−1 outputs.
Backend& Group::scatter_backend(const Tensor& input, const Tensor& output, ReduceOp op, const char* primitive) {
  Backend* backend = nullptr;
  agree_after_checks(
      "reduce_scatter",
      [&] {
        backend = &backend_for(input, output, primitive);
        check_reduction(*this, primitive, input.dtype(), op);
        check_divisible_rows(*this, primitive, input);
        check_output(*this, primitive, input, output, with_dim0(input.shape(), input.size(0) / size()));
      },
      &input, static_cast<std::int64_t>(op));
  return *backend;
}

void Group::count_reduce_scatter(const Tensor& output) {
  const std::int64_t bytes = (size() - 1) * bytes_of(output);
  traffic_->record(Primitive::reduce_scatter, bytes, bytes);
}

void Group::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  scatter_backend(input, output, op, "reduce_scatter").reduce_scatter(input, output, op);
  count_reduce_scatter(output);
}

// Counted when posted, like iall_reduce.
Request Group::ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  Request request = scatter_backend(input, output, op, "ireduce_scatter").ireduce_scatter(input, output, op);
  count_reduce_scatter(output);
  return request;
}

void Group::all_to_all(const Tensor& input, Tensor& output) {
  Backend* backend = nullptr;
  agree_after_checks(
      "all_to_all",
      [&] {
        backend = &backend_for(input, output, "all_to_all");
        check_divisible_rows(*this, "all_to_all", input);
        check_output(*this, "all_to_all", input, output, input.shape());
      },
      &input);
  backend->all_to_all(input, output);
  const std::int64_t bytes = (size() - 1) * (bytes_of(input) / size());
  traffic_->record(Primitive::all_to_all, bytes, bytes);
}

void Group::broadcast(Tensor& t, int root) {
  Backend* backend = nullptr;
  agree_after_checks(
      "broadcast",
      [&] {
        backend = &backend_for(t, "broadcast");
        check_peer(*this, root, "broadcast", "root");
      },
      &t, root);
  backend->broadcast(t, root);
  if (size() > 1) traffic_->record(Primitive::broadcast, rank_ == root ? bytes_of(t) : 0, rank_ == root ? 0 : bytes_of(t));
}

void Group::barrier() {
  agree_on_call("barrier", nullptr);
  cpu_->barrier();
}

Tensor Group::all_gather(const Tensor& input) {
  check_before_allocating("all_gather", [&] { check_has_rows(*this, "all_gather", input); });
  Tensor output = Tensor::empty(with_dim0(input.shape(), size() * input.size(0)), input.dtype(), input.device());
  all_gather(input, output);
  return output;
}

Tensor Group::reduce_scatter(const Tensor& input, ReduceOp op) {
  check_before_allocating("reduce_scatter", [&] { check_divisible_rows(*this, "reduce_scatter", input); });
  Tensor output = Tensor::empty(with_dim0(input.shape(), input.size(0) / size()), input.dtype(), input.device());
  reduce_scatter(input, output, op);
  return output;
}

Tensor Group::all_to_all(const Tensor& input) {
  check_before_allocating("all_to_all", [&] { check_has_rows(*this, "all_to_all", input); });
  Tensor output = Tensor::empty(input.shape(), input.dtype(), input.device());
  all_to_all(input, output);
  return output;
}

Tensor Group::all_gather_v(const Tensor& input) {
  // The row counts are exchanged before the full form runs its checks, so the input is agreed
  // on first (with argument checks on; without them a bad input throws here, on this rank).
  agree_after_checks("all_gather_v", [&] { check_has_rows(*this, "all_gather_v", input); }, &input);
  Tensor mine = Tensor::from_vector(std::vector<std::int64_t>{input.size(0)}, {1});
  Tensor all = Tensor::empty({size()}, DType::i64);
  {
    const CallLabel label("all_gather_v (row counts)");
    cpu_->all_gather(mine, all);
  }
  const std::vector<std::int64_t> rows = all.to_vector<std::int64_t>();
  const std::int64_t total_rows = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
  Tensor output = Tensor::empty(with_dim0(input.shape(), total_rows), input.dtype(), input.device());
  all_gather_v(input, output, rows);
  return output;
}

Traffic sum_over_ranks(Group& group, const Traffic& traffic) {
  Tensor values = Tensor::from_vector(std::vector<std::int64_t>{traffic.messages_sent, traffic.bytes_sent,
                                                                traffic.messages_received, traffic.bytes_received},
                                      {4});
  {
    const CallLabel label("sum_over_ranks");
    group.cpu_->all_reduce(values, ReduceOp::sum);
  }
  const std::vector<std::int64_t> v = values.to_vector<std::int64_t>();
  return Traffic{v[0], v[1], v[2], v[3]};
}

}  // namespace wf::comm
