// The part every stream-ordered transport shares (stream_backend.h).
#include "src/comm/stream_backend.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "src/comm/watchdog.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/log.h"

namespace wf::comm {
namespace {

// A posted operation: complete when its event on the comm stream has passed.
class StreamRequest final : public RequestImpl {
 public:
  StreamRequest(std::shared_ptr<StreamBackend> backend, const char* primitive, Event done)
      : backend_(std::move(backend)), primitive_(primitive), done_(std::move(done)) {}

  void wait() override {
    if (finished_) return;
    detail::count_host_sync();
    const CallSite site{backend_->group_name(), primitive_, backend_->rank(), backend_->size()};
    wait_until(site, [this] { return test(); }, [this] { backend_->abort_transport(); });
  }
  bool test() override {
    if (finished_) return true;
    backend_->raise_async_error();
    finished_ = done_.query();
    return finished_;
  }
  // The consumer's stream waits on the device: no host wait.
  Event record_event(const Stream&) override { return done_; }
  bool completes_on_device() const override { return true; }

 private:
  std::shared_ptr<StreamBackend> backend_;
  const char* primitive_;
  Event done_;
  bool finished_ = false;
};

}  // namespace

Stream comm_stream(Device device) {
  static std::mutex mutex;
  static std::map<std::pair<DeviceType, int>, Stream> streams;
  std::lock_guard lock(mutex);
  const auto key = std::make_pair(device.type, device.index);
  auto it = streams.find(key);
  if (it == streams.end()) it = streams.emplace(key, Stream::create(device)).first;
  return it->second;
}

StreamBackend::StreamBackend(std::string group_name, int rank, int size, Device device, Stream stream)
    : group_name_(std::move(group_name)), rank_(rank), size_(size), device_(device), stream_(stream) {
  WF_CHECK(!device_.is_cpu(), "a stream transport for group '{}' needs a device, not the cpu", group_name_);
  WF_CHECK(stream_.device() == device_, "the stream transport of group '{}' on {} was given a stream of {}",
           group_name_, device_.str(), stream_.device().str());
}

StreamBackend::~StreamBackend() {
  // Nothing may still be using the buffers released with the list: wait for what is in flight.
  std::lock_guard lock(in_flight_mutex_);
  try {
    for (InFlight& op : in_flight_) {
      if (!op.done.query()) op.done.synchronize();
    }
  } catch (const std::exception& e) {
    log::error("the device transport of group '{}': waiting for its last operations failed: {}", group_name_,
               e.what());
  }
}

void StreamBackend::check_buffer(const Tensor& t, const char* primitive) const {
  WF_CHECK(t.defined(), "{} {} on group '{}': the tensor is undefined", name(), primitive, group_name_);
  WF_CHECK(t.device() == device_,
           "{} {} on group '{}': the tensor is on {}, but this transport moves tensors of {}; move it there first "
           "(x.to({}))",
           name(), primitive, group_name_, t.device().str(), device_.str(), device_.str());
}

void StreamBackend::check_peer(int peer, const char* primitive) const {
  WF_CHECK(peer >= 0 && peer < size_, "{} {} on group '{}': peer {} is outside the group's ranks [0, {})", name(),
           primitive, group_name_, peer, size_);
}

Request StreamBackend::enqueue(const char* primitive, std::vector<Tensor> buffers, const Issue& issue) {
  check_async_error();
  for (const Tensor& t : buffers) check_buffer(t, primitive);
  const Stream& comm = stream_;
  Event ready;
  ready.record(Stream::current(device_));
  comm.wait(ready);
  issue(comm);
  Event done;
  done.record(comm);
  {
    std::lock_guard lock(in_flight_mutex_);
    std::erase_if(in_flight_, [](const InFlight& op) { return op.done.query(); });
    in_flight_.push_back({done, std::move(buffers)});
  }
  return Request(std::make_shared<StreamRequest>(shared_from_this(), primitive, std::move(done)));
}

void StreamBackend::wait_on_device(Request request) const { request.make_wait(Stream::current(device_)); }

// ---- point to point ------------------------------------------------------------------------

Request StreamBackend::isend(const Tensor& t, int peer, int /*tag*/) {
  check_peer(peer, "send");
  std::vector<P2p> legs{{t, peer, false}};
  return enqueue("send", {t}, [this, legs](const Stream& comm) { issue_p2p(comm, legs); });
}

Request StreamBackend::irecv(Tensor& t, int peer, int /*tag*/) {
  check_peer(peer, "recv");
  std::vector<P2p> legs{{t, peer, true}};
  return enqueue("recv", {t}, [this, legs](const Stream& comm) { issue_p2p(comm, legs); });
}

void StreamBackend::send(const Tensor& t, int peer, int tag) { wait_on_device(isend(t, peer, tag)); }

void StreamBackend::recv(Tensor& t, int peer, int tag) { wait_on_device(irecv(t, peer, tag)); }

Request StreamBackend::isendrecv(const Tensor& send, int dst, Tensor& recv, int src, int /*tag*/) {
  check_peer(dst, "sendrecv");
  check_peer(src, "sendrecv");
  // The outgoing data must not be overwritten by the incoming while it is sent.
  const Tensor outgoing = send.shares_storage_with(recv) ? send.clone() : send;
  std::vector<P2p> legs{{recv, src, true}, {outgoing, dst, false}};
  return enqueue("sendrecv", {outgoing, recv}, [this, legs](const Stream& comm) { issue_p2p(comm, legs); });
}

void StreamBackend::sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int tag) {
  wait_on_device(isendrecv(send, dst, recv, src, tag));
}

// ---- collectives ---------------------------------------------------------------------------

Request StreamBackend::post_all_reduce(Tensor& t, ReduceOp op, Form form) {
  return enqueue("all_reduce", {t}, [this, t, op, form](const Stream& comm) { issue_all_reduce(comm, t, op, form); });
}

Request StreamBackend::iall_reduce(Tensor& t, ReduceOp op) { return post_all_reduce(t, op, Form::nonblocking); }

void StreamBackend::all_reduce(Tensor& t, ReduceOp op) {
  wait_on_device(post_all_reduce(t, op, Form::blocking));
}

Request StreamBackend::post_all_gather(const Tensor& input, Tensor& output, Form form) {
  return enqueue("all_gather", {input, output},
                 [this, input, output, form](const Stream& comm) { issue_all_gather(comm, input, output, form); });
}

Request StreamBackend::iall_gather(const Tensor& input, Tensor& output) {
  return post_all_gather(input, output, Form::nonblocking);
}

void StreamBackend::all_gather(const Tensor& input, Tensor& output) {
  wait_on_device(post_all_gather(input, output, Form::blocking));
}

Request StreamBackend::post_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, Form form) {
  return enqueue("reduce_scatter", {input, output}, [this, input, output, op, form](const Stream& comm) {
    issue_reduce_scatter(comm, input, output, op, form);
  });
}

Request StreamBackend::ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  return post_reduce_scatter(input, output, op, Form::nonblocking);
}

void StreamBackend::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  wait_on_device(post_reduce_scatter(input, output, op, Form::blocking));
}

void StreamBackend::broadcast(Tensor& t, int root) {
  check_peer(root, "broadcast");
  wait_on_device(enqueue("broadcast", {t}, [this, t, root](const Stream& comm) { issue_broadcast(comm, t, root); }));
}

std::vector<StreamBackend::P2p> StreamBackend::all_to_all_legs(const Tensor& input, const Tensor& output) const {
  const std::int64_t rows = input.size(0) / size_;
  std::vector<P2p> legs;
  for (int p = 0; p < size_; ++p) {
    legs.push_back({output.slice0(p * rows, (p + 1) * rows), p, true});
    legs.push_back({input.slice0(p * rows, (p + 1) * rows), p, false});
  }
  return legs;
}

void StreamBackend::all_to_all(const Tensor& input, Tensor& output) {
  std::vector<P2p> legs = all_to_all_legs(input, output);
  wait_on_device(enqueue("all_to_all", {input, output}, [this, legs](const Stream& comm) { issue_p2p(comm, legs); }));
}

void StreamBackend::all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) {
  WF_CHECK(static_cast<int>(rows.size()) == size_, "{} all_gather_v on group '{}': {} row counts for {} ranks", name(),
           group_name_, rows.size(), size_);
  std::vector<P2p> legs;
  std::int64_t offset = 0;
  for (int p = 0; p < size_; ++p) {
    const std::int64_t n = rows[static_cast<std::size_t>(p)];
    if (n > 0) legs.push_back({output.slice0(offset, offset + n), p, true});
    if (input.size(0) > 0) legs.push_back({input, p, false});
    offset += n;
  }
  wait_on_device(
      enqueue("all_gather_v", {input, output}, [this, legs](const Stream& comm) { issue_p2p(comm, legs); }));
}

void StreamBackend::barrier() {
  Tensor token = Tensor::zeros({1}, DType::f32, device_);
  iall_reduce(token, ReduceOp::sum).wait();
}

}  // namespace wf::comm
