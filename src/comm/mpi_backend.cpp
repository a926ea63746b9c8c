#include "src/comm/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <utility>

#include "src/comm/progress.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::comm {
namespace {

// bf16 travels as itself: MPI combines two bf16 buffers with the user ops below, each element
// widened to f32, combined, and rounded once (what NCCL does for bf16), so the wire carries half
// the bytes of an f32 copy. Except avg, whose division by the group size needs the f32 sum; and
// f16, which MPI reduces in an f32 copy.
bool reduces_in_f32(DType dtype, ReduceOp op) {
  return dtype == DType::f16 || (dtype == DType::bf16 && op == ReduceOp::avg);
}

MPI_Datatype reduction_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: return MPI_UINT16_T;  // the bits; only the bf16 user ops combine them
    case DType::f16: break;                 // reduced in an f32 copy
  }
  WF_FAIL("MPI reduction of dtype {}: convert it to f32 first", dtype_name(dtype));
}

// inout[i] = combine(in[i], inout[i]) over bf16 elements, in f32.
template <typename Combine>
void combine_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(Combine{}(bf16_to_float(a[i]), bf16_to_float(b[i])));
}
struct Sum {
  float operator()(float a, float b) const { return a + b; }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};

// The bf16 ops, created once per process (after MPI_Init: the first bf16 reduction comes after
// it) and left to MPI_Finalize. Commutative: MPI may combine in any order, as for MPI_SUM.
struct Bf16Ops {
  MPI_Op sum, max, min;
  Bf16Ops() {
    check_mpi(MPI_Op_create(&combine_bf16<Sum>, 1, &sum), "MPI_Op_create (bf16 sum)");
    check_mpi(MPI_Op_create(&combine_bf16<Max>, 1, &max), "MPI_Op_create (bf16 max)");
    check_mpi(MPI_Op_create(&combine_bf16<Min>, 1, &min), "MPI_Op_create (bf16 min)");
  }
};

// avg is a sum followed by a division: MPI has no average op.
MPI_Op reduction_op(ReduceOp op, DType dtype) {
  if (dtype == DType::bf16) {
    static const Bf16Ops bf16_ops;
    switch (op) {
      case ReduceOp::max: return bf16_ops.max;
      case ReduceOp::min: return bf16_ops.min;
      case ReduceOp::sum: return bf16_ops.sum;
      case ReduceOp::avg: break;  // reduced in an f32 copy (reduces_in_f32)
    }
  }
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
  }
  WF_FAIL("MPI: unknown reduce op {}", static_cast<int>(op));
}

void divide_in_place(Tensor& t, int divisor) {
  dispatch_float(t.dtype(), "all_reduce / reduce_scatter avg", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    const std::int64_t n = t.numel();
    for (std::int64_t i = 0; i < n; ++i) p[i] /= static_cast<T>(divisor);
  });
}

// The buffer MPI reduces: the tensor itself, or an f32 copy (reduces_in_f32).
Tensor reduction_buffer(const Tensor& t, ReduceOp op) { return reduces_in_f32(t.dtype(), op) ? t.to(DType::f32) : t; }

// After MPI reduced into `reduced`: divides for avg, then copies into `target` when `reduced`
// was a separate (f32) buffer.
void finish_reduction(Tensor& reduced, Tensor& target, ReduceOp op, int group_size) {
  if (op == ReduceOp::avg) divide_in_place(reduced, group_size);
  if (!reduced.is_same(target)) target.copy_(reduced);
}

// MPI forbids overlapping send and receive buffers (other than MPI_IN_PLACE): copy the input
// when the caller passed, say, a slice of the output.
Tensor distinct_from(const Tensor& input, const Tensor& output) {
  return input.shares_storage_with(output) ? input.clone() : input;
}

// Bytes of one dim-0 row (also for a tensor with no rows).
std::int64_t bytes_per_row(const Tensor& t) {
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(t.dtype()));
  for (std::size_t d = 1; d < t.shape().size(); ++d) bytes *= t.shape()[d];
  return bytes;
}

void* mutable_data(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

// A posted operation: one or two P2P legs (isendrecv) or one collective. Its MPI requests live
// in a PendingOperation that the progress thread (progress.h) may be testing; test() and wait()
// take its lock. `on_complete` runs once, after the requests completed: it reports their outcome
// (throwing the first failure) and finishes the operation's work (a reduction's copy back).
// Holds the backend so the communicator outlives the requests.
class MpiRequest final : public RequestImpl {
 public:
  using Completion = std::function<void(const PendingOperation&)>;

  MpiRequest(std::shared_ptr<PendingOperation> operation, Completion on_complete,
             std::shared_ptr<const MpiBackend> backend, const char* primitive)
      : operation_(std::move(operation)),
        on_complete_(std::move(on_complete)),
        backend_(std::move(backend)),
        primitive_(primitive) {}

  // Dropping a request before it completes would let MPI write into freed memory, so the
  // destructor completes it (under the watchdog).
  ~MpiRequest() override {
    if (done_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::error("{} dropped without wait() and failed: {}", backend_->context(primitive_), e.what());
    }
  }

  void wait() override {
    if (done_) return;
    {
      std::lock_guard lock(operation_->mutex);
      if (!operation_->complete.load(std::memory_order_acquire)) {
        wait_busy_then_back_off(operation_->pending(), operation_->outcomes(), backend_->site(primitive_));
        operation_->complete.store(true, std::memory_order_release);
      }
    }
    finish();
  }

  bool test() override {
    if (done_) return true;
    {
      std::lock_guard lock(operation_->mutex);
      if (!operation_->complete.load(std::memory_order_acquire) && !operation_->test_all()) return false;
    }
    finish();
    return true;
  }

 private:
  void finish() {
    done_ = true;
    const Completion on_complete = std::exchange(on_complete_, {});
    if (on_complete) on_complete(*operation_);
  }

  std::shared_ptr<PendingOperation> operation_;
  Completion on_complete_;
  std::shared_ptr<const MpiBackend> backend_;
  const char* primitive_;
  bool done_ = false;
};

// ---- device tensors: staged through host memory ------------------------------------------------
// MPI reads and writes host memory only. A tensor on a device (the test device; a GPU without
// NCCL, or ranks sharing one GPU) goes through a host copy in the device's pinned memory, which
// the device copies to and from directly: one to send, filled by copy_, which synchronises the
// device's stream so the values are final; one to receive into, copied back to the device on
// the stream of the thread that completes the request, once MPI has written it.

bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }
// What MPI sends: the tensor itself on the host, else its host copy (a staging synchronisation:
// core/stream.h staging_sync_count).
Tensor host_copy(const Tensor& t) {
  if (!on_device(t)) return t;
  detail::StagingScope staging;
  Tensor host = Tensor::empty_pinned(t.shape(), t.dtype(), t.device());
  host.copy_(t);
  return host;
}
// What MPI receives into: the tensor itself on the host, else a pinned host buffer of its shape.
Tensor host_buffer(const Tensor& t) {
  return on_device(t) ? Tensor::empty_pinned(t.shape(), t.dtype(), t.device()) : t;
}
// Copies what MPI received into `host` back into `target` (nothing when they are one tensor).
void copy_back(Tensor& target, const Tensor& host) {
  if (!host.is_same(target)) target.copy_(host);
}

// A request whose completion also copies a host buffer back into its device tensor, once.
class StagedRequest final : public RequestImpl {
 public:
  StagedRequest(Request inner, Tensor target, Tensor host)
      : inner_(std::move(inner)), target_(std::move(target)), host_(std::move(host)) {}
  // Dropped without wait(): completed like an MpiRequest, so the device tensor gets what a host
  // tensor would have.
  ~StagedRequest() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (copied_ || finalized) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::error("a staged receive dropped without wait() failed: {}", e.what());
    }
  }

  void wait() override {
    inner_.wait();
    finish(Stream::current(target_.device()));
  }
  bool test() override {
    if (!inner_.test()) return false;
    finish(Stream::current(target_.device()));
    return true;
  }
  // The copy back runs on `stream` itself when it is the target's device's, so the event recorded
  // after it covers it.
  Event record_event(const Stream& stream) override {
    inner_.wait();
    finish(stream.device() == target_.device() ? stream : Stream::current(target_.device()));
    Event event;
    event.record(stream);
    return event;
  }

 private:
  void finish(const Stream& stream) {
    if (copied_) return;
    copied_ = true;
    StreamGuard on(stream);
    copy_back(target_, host_);
  }

  Request inner_;
  Tensor target_, host_;
  bool copied_ = false;
};

// `inner` (posted on `host`), completed by copying `host` back into `target` when they differ.
Request staged(Request inner, const Tensor& target, const Tensor& host) {
  if (host.is_same(target)) return inner;
  return Request(std::make_shared<StagedRequest>(std::move(inner), target, host));
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, std::string group_name) : comm_(comm), group_name_(std::move(group_name)) {
  WF_CHECK(comm_ != MPI_COMM_NULL, "MpiBackend for group '{}': the communicator is MPI_COMM_NULL", group_name_);
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), context("MPI_Comm_set_errhandler"));
  check_mpi(MPI_Comm_rank(comm_, &rank_), context("MPI_Comm_rank"));
  check_mpi(MPI_Comm_size(comm_, &size_), context("MPI_Comm_size"));
  int* upper_bound = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &upper_bound, &found), context("MPI_Comm_get_attr(MPI_TAG_UB)"));
  if (found && upper_bound != nullptr) tag_upper_bound_ = *upper_bound;
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) MPI_Comm_free(&comm_);
}

std::string MpiBackend::context(const char* primitive) const {
  return fmt::format("{} on group '{}'", primitive, group_name_);
}

int MpiBackend::to_count(std::int64_t count, const char* primitive) const {
  WF_CHECK(count <= INT_MAX, "{}: {} elements or bytes do not fit MPI's int count; move the tensor in pieces of "
                             "under 2^31",
           context(primitive), count);
  return static_cast<int>(count);
}

void MpiBackend::blocking(const char* primitive, const std::function<int()>& call) const {
  check_mpi(run_watched(site(primitive), call), context(primitive));
}

void MpiBackend::verify_receive(const MPI_Status& status, const Tensor& buffer, int peer,
                                const char* primitive) const {
  const std::string buffer_text =
      fmt::format("{} {} ({} bytes)", dtype_name(buffer.dtype()), shape_str(buffer.shape()), buffer.nbytes());
  if (status.MPI_ERROR != MPI_SUCCESS) {
    int error_class = MPI_SUCCESS;
    MPI_Error_class(status.MPI_ERROR, &error_class);
    WF_CHECK(error_class != MPI_ERR_TRUNCATE,
             "{} (group rank {}): the message from rank {} is larger than the receive buffer {}; sender and receiver "
             "must agree on shape and dtype",
             context(primitive), rank_, peer, buffer_text);
    check_mpi(status.MPI_ERROR, fmt::format("{} from rank {}", context(primitive), peer));
  }
  int received = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &received), context("MPI_Get_count"));
  WF_CHECK(static_cast<std::size_t>(received) == buffer.nbytes(),
           "{} (group rank {}): received {} bytes from rank {}, but the receive buffer is {}; sender and receiver "
           "must agree on shape and dtype",
           context(primitive), rank_, received, peer, buffer_text);
}

void MpiBackend::check_peer_tag(int peer, int tag, const char* primitive) const {
  WF_CHECK(peer >= 0 && peer < size_, "{}: peer {} is not a rank of this group of {}", context(primitive), peer, size_);
  WF_CHECK(tag >= 0 && tag <= tag_upper_bound_, "{}: tag {} is outside [0, {}] (MPI_TAG_UB)", context(primitive), tag,
           tag_upper_bound_);
}

MPI_Request MpiBackend::post(const P2pLeg& leg, int tag, const char* primitive) {
  const int bytes = to_count(static_cast<std::int64_t>(leg.buffer.nbytes()), primitive);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = leg.receive ? MPI_Irecv(mutable_data(leg.buffer), bytes, MPI_BYTE, leg.peer, tag, comm_, &request)
                             : MPI_Isend(leg.buffer.raw_data(), bytes, MPI_BYTE, leg.peer, tag, comm_, &request);
  check_mpi(rc, fmt::format("{} {} rank {}", context(primitive), leg.receive ? "from" : "to", leg.peer));
  return request;
}

Request MpiBackend::start(std::vector<P2pLeg> legs, int tag, const char* primitive, bool overlapped) {
  WF_CHECK(legs.size() <= PendingOperation::kMaxRequests, "{}: {} legs in one operation (at most {})",
           context(primitive), legs.size(), PendingOperation::kMaxRequests);
  for (const P2pLeg& leg : legs) check_peer_tag(leg.peer, tag, primitive);
  auto operation = std::make_shared<PendingOperation>();
  for (const P2pLeg& leg : legs) {
    try {
      operation->requests[static_cast<std::size_t>(operation->count)] = post(leg, tag, primitive);
    } catch (...) {
      // Nothing may stay posted into a buffer the caller is about to get back.
      for (MPI_Request& posted : operation->pending()) {
        MPI_Cancel(&posted);
        MPI_Request_free(&posted);
      }
      throw;
    }
    ++operation->count;
  }
  // Only requests handed back to the caller are worth a progress thread: a blocking call
  // waits (and so progresses) right away.
  if (overlapped) track_for_progress(operation);
  // Reports each leg's outcome (the first failure throws); legs[i] was posted as requests[i].
  auto verify = [this, legs = std::move(legs), primitive](const PendingOperation& done) {
    for (std::size_t i = 0; i < legs.size(); ++i) {
      const MPI_Status& status = done.statuses[i];
      if (legs[i].receive) {
        verify_receive(status, legs[i].buffer, legs[i].peer, primitive);
      } else {
        check_mpi(status.MPI_ERROR, fmt::format("{} to rank {}", context(primitive), legs[i].peer));
      }
    }
  };
  return Request(std::make_shared<MpiRequest>(std::move(operation), std::move(verify), shared_from_this(), primitive));
}

Request MpiBackend::start_p2p(const Tensor& t, int peer, int tag, bool receive, const char* primitive,
                              bool overlapped) {
  return start({P2pLeg{t, peer, receive}}, tag, primitive, overlapped);
}

void MpiBackend::send(const Tensor& t, int peer, int tag) {
  start_p2p(host_copy(t), peer, tag, false, "send", false).wait();
}
void MpiBackend::recv(Tensor& t, int peer, int tag) {
  const Tensor host = host_buffer(t);
  start_p2p(host, peer, tag, true, "recv", false).wait();
  copy_back(t, host);
}
Request MpiBackend::isend(const Tensor& t, int peer, int tag) {
  return start_p2p(host_copy(t), peer, tag, false, "isend", true);  // the request holds the copy
}
Request MpiBackend::irecv(Tensor& t, int peer, int tag) {
  const Tensor host = host_buffer(t);
  return staged(start_p2p(host, peer, tag, true, "irecv", true), t, host);
}

// Blocking: MPI_Sendrecv under the watchdog's monitor, like the blocking collectives (posting
// the two halves and polling them was 14–42 % slower than MPI_Sendrecv at 1–16 MiB).
void MpiBackend::sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  if (on_device(send) || on_device(recv)) {
    Tensor host = host_buffer(recv);
    sendrecv(host_copy(send), dst, host, src, tag);
    copy_back(recv, host);
    return;
  }
  check_peer_tag(dst, tag, "sendrecv");
  check_peer_tag(src, tag, "sendrecv");
  const Tensor out = distinct_from(send, recv);
  const int send_bytes = to_count(static_cast<std::int64_t>(out.nbytes()), "sendrecv");
  const int recv_bytes = to_count(static_cast<std::int64_t>(recv.nbytes()), "sendrecv");
  MPI_Status status{};
  const int rc = run_watched(site("sendrecv"), [&] {
    return MPI_Sendrecv(out.raw_data(), send_bytes, MPI_BYTE, dst, tag, mutable_data(recv), recv_bytes, MPI_BYTE, src,
                        tag, comm_, &status);
  });
  status.MPI_ERROR = rc;  // MPI leaves it unset for single completions
  verify_receive(status, recv, src, "sendrecv");
}

// The receive is posted first, so a message from a rank that sends first finds it waiting.
Request MpiBackend::isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  if (on_device(send) || on_device(recv)) {
    Tensor host = host_buffer(recv);
    return staged(isendrecv(host_copy(send), dst, host, src, tag), recv, host);
  }
  return start({P2pLeg{recv, src, true}, P2pLeg{distinct_from(send, recv), dst, false}}, tag, "isendrecv",
               /*overlapped=*/true);
}

void MpiBackend::all_reduce(Tensor& t, ReduceOp op) {
  if (on_device(t)) {
    Tensor host = host_copy(t);
    all_reduce(host, op);
    copy_back(t, host);
    return;
  }
  Tensor buffer = reduction_buffer(t, op);
  blocking("all_reduce", [&] {
    return MPI_Allreduce(MPI_IN_PLACE, buffer.raw_data(), to_count(buffer.numel(), "all_reduce"),
                         reduction_type(buffer.dtype()), reduction_op(op, buffer.dtype()), comm_);
  });
  finish_reduction(buffer, t, op, size_);
}

Request MpiBackend::start_collective(const char* primitive, const std::function<int(MPI_Request*)>& post,
                                     std::function<void()> finish) {
  auto operation = std::make_shared<PendingOperation>();
  check_mpi(post(&operation->requests[0]), context(primitive));
  operation->count = 1;
  track_for_progress(operation);
  auto done = [this, primitive, finish = std::move(finish)](const PendingOperation& completed) {
    check_mpi(completed.statuses[0].MPI_ERROR, context(primitive));
    if (finish) finish();
  };
  return Request(std::make_shared<MpiRequest>(std::move(operation), std::move(done), shared_from_this(), primitive));
}

// MPI_Iallreduce (libnbc), moved by the progress thread while the caller computes; the
// Request's completion divides for avg and copies the result back.
Request MpiBackend::iall_reduce(Tensor& t, ReduceOp op) {
  if (on_device(t)) {
    Tensor host = host_copy(t);
    return staged(iall_reduce(host, op), t, host);
  }
  Tensor buffer = reduction_buffer(t, op);
  return start_collective(
      "iall_reduce",
      [&](MPI_Request* request) {
        return MPI_Iallreduce(MPI_IN_PLACE, buffer.raw_data(), to_count(buffer.numel(), "iall_reduce"),
                              reduction_type(buffer.dtype()), reduction_op(op, buffer.dtype()), comm_, request);
      },
      [this, target = t, buffer, op]() mutable { finish_reduction(buffer, target, op, size_); });
}

namespace {
// What MPI reduce-scatters: the input itself (a copy when it overlaps the output), or f32
// copies of the input and output (reduces_in_f32); `receive` is the output when no copy is needed.
struct ScatterBuffers {
  Tensor send, receive;
};
ScatterBuffers scatter_buffers(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (reduces_in_f32(input.dtype(), op)) return {input.to(DType::f32), Tensor::empty(output.shape(), DType::f32)};
  return {distinct_from(input, output), output};
}
}  // namespace

void MpiBackend::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    reduce_scatter(host_copy(input), host, op);
    copy_back(output, host);
    return;
  }
  ScatterBuffers b = scatter_buffers(input, output, op);
  blocking("reduce_scatter", [&] {
    return MPI_Reduce_scatter_block(b.send.raw_data(), b.receive.raw_data(),
                                    to_count(b.receive.numel(), "reduce_scatter"), reduction_type(b.send.dtype()),
                                    reduction_op(op, b.send.dtype()), comm_);
  });
  finish_reduction(b.receive, output, op, size_);
}

Request MpiBackend::ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    return staged(ireduce_scatter(host_copy(input), host, op), output, host);
  }
  ScatterBuffers b = scatter_buffers(input, output, op);
  return start_collective(
      "ireduce_scatter",
      [&](MPI_Request* request) {
        return MPI_Ireduce_scatter_block(b.send.raw_data(), b.receive.raw_data(),
                                         to_count(b.receive.numel(), "ireduce_scatter"),
                                         reduction_type(b.send.dtype()), reduction_op(op, b.send.dtype()), comm_, request);
      },
      [this, b, target = output, op]() mutable { finish_reduction(b.receive, target, op, size_); });
}

void MpiBackend::all_gather(const Tensor& input, Tensor& output) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    all_gather(host_copy(input), host);
    copy_back(output, host);
    return;
  }
  const Tensor send = distinct_from(input, output);
  const int bytes = to_count(static_cast<std::int64_t>(send.nbytes()), "all_gather");
  blocking("all_gather", [&] {
    return MPI_Allgather(send.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, comm_);
  });
}

Request MpiBackend::iall_gather(const Tensor& input, Tensor& output) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    return staged(iall_gather(host_copy(input), host), output, host);
  }
  const Tensor send = distinct_from(input, output);
  const int bytes = to_count(static_cast<std::int64_t>(send.nbytes()), "iall_gather");
  return start_collective(
      "iall_gather",
      [&](MPI_Request* request) {
        return MPI_Iallgather(send.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, comm_, request);
      },
      [send, output] {});  // holds both buffers until MPI is done with them
}

void MpiBackend::all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    all_gather_v(host_copy(input), host, rows);
    copy_back(output, host);
    return;
  }
  const Tensor send = distinct_from(input, output);
  const std::int64_t row_bytes = bytes_per_row(input);
  std::vector<int> counts(rows.size()), displacements(rows.size());
  std::int64_t offset = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    counts[r] = to_count(rows[r] * row_bytes, "all_gather_v");
    displacements[r] = to_count(offset, "all_gather_v");
    offset += rows[r] * row_bytes;
  }
  blocking("all_gather_v", [&] {
    return MPI_Allgatherv(send.raw_data(), counts[static_cast<std::size_t>(rank_)], MPI_BYTE, output.raw_data(),
                          counts.data(), displacements.data(), MPI_BYTE, comm_);
  });
}

void MpiBackend::all_to_all(const Tensor& input, Tensor& output) {
  if (on_device(input) || on_device(output)) {
    Tensor host = host_buffer(output);
    all_to_all(host_copy(input), host);
    copy_back(output, host);
    return;
  }
  const Tensor send = distinct_from(input, output);
  const int chunk = to_count(static_cast<std::int64_t>(send.nbytes()) / size_, "all_to_all");
  blocking("all_to_all",
           [&] { return MPI_Alltoall(send.raw_data(), chunk, MPI_BYTE, output.raw_data(), chunk, MPI_BYTE, comm_); });
}

void MpiBackend::broadcast(Tensor& t, int root) {
  WF_CHECK(root >= 0 && root < size_, "{}: root {} is not a rank of this group of {}", context("broadcast"), root,
           size_);
  if (on_device(t)) {
    Tensor host = host_copy(t);
    broadcast(host, root);
    copy_back(t, host);
    return;
  }
  blocking("broadcast", [&] {
    return MPI_Bcast(t.raw_data(), to_count(static_cast<std::int64_t>(t.nbytes()), "broadcast"), MPI_BYTE, root, comm_);
  });
}

void MpiBackend::barrier() {
  blocking("barrier", [&] { return MPI_Barrier(comm_); });
}

}  // namespace wf::comm
