// The NCCL backend (semantics in nccl_backend.h). Everything that touches CUDA or NCCL is
// compiled only when both were found; other builds get a factory that says why there is none.
#include "src/comm/nccl_backend.h"

#include "wallfacer/comm/group.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"

#if WF_HAVE_CUDA && WF_HAVE_NCCL

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>

#include "src/comm/watchdog.h"

namespace wf::comm {
namespace {

// The one place where CUDA and NCCL status codes become errors (two overloads, one rule).
void check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  WF_FAIL("CUDA error in {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}
void check(ncclResult_t status, std::string_view what) {
  if (status == ncclSuccess) return;
  const char* detail = ncclGetLastError(nullptr);  // the argument is unused by NCCL
  WF_FAIL("NCCL error in {}: {}{}{}", what, ncclGetErrorString(status), detail && *detail ? ": " : "",
          detail ? detail : "");
}

// Makes `device` current for the scope: the calling thread may be working on another GPU.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

ncclDataType_t nccl_dtype(DType dtype, const char* primitive) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  WF_FAIL("nccl {}: dtype {} has no NCCL equivalent", primitive, dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
  }
  WF_FAIL("nccl: unknown reduce op {}", static_cast<int>(op));
}

// The device pointer of a tensor, after checking that it lives on the communicator's GPU.
// (raw_data() of a cuda tensor is its device pointer; NCCL takes non-const pointers for
// outputs, so constness is dropped here, in one place.)
void* device_data(const Tensor& t, int device, const char* primitive, const char* role) {
  WF_CHECK(t.defined(), "nccl {}: the {} tensor is undefined", primitive, role);
  WF_CHECK(t.device() == Device::cuda(device),
           "nccl {}: the {} tensor ({}, {}) is on {}, but this NCCL communicator works on cuda:{}; move it with "
           ".to(Device::cuda({})) or use the group's CPU backend",
           primitive, role, shape_str(t.shape()), dtype_name(t.dtype()), t.device().str(), device, device);
  return const_cast<void*>(t.raw_data());
}

void check_same_dtype(const char* primitive, const Tensor& input, const Tensor& output) {
  WF_CHECK(input.dtype() == output.dtype(), "nccl {}: input dtype {} differs from output dtype {}", primitive,
           dtype_name(input.dtype()), dtype_name(output.dtype()));
}

// Runs `body` (NCCL calls) between ncclGroupStart and ncclGroupEnd, closing the group even when
// the body throws, so that a failed call cannot leave this thread inside an open group.
template <typename Body>
void grouped(const char* primitive, Body&& body) {
  check(ncclGroupStart(), fmt::format("{} (ncclGroupStart)", primitive));
  try {
    body();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  check(ncclGroupEnd(), fmt::format("{} (ncclGroupEnd)", primitive));
}

// A pending operation: the event recorded on the stream right after it. The request holds the
// tensors the operation reads or writes, so their memory cannot be freed and reused while NCCL
// still works on it; dropping an unfinished request waits for it first.
class NcclRequest final : public RequestImpl {
 public:
  NcclRequest(std::shared_ptr<NcclComm> comm, const char* primitive, cudaEvent_t event, std::vector<Tensor> buffers)
      : comm_(std::move(comm)), primitive_(primitive), event_(event), buffers_(std::move(buffers)) {}
  ~NcclRequest() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {  // a destructor cannot report it; the communicator is aborted by then
      }
    }
    cudaEventDestroy(event_);
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;

  bool test() override {
    if (done_) return true;
    WF_CHECK(!comm_->aborted, "nccl {}: the communicator was aborted by an earlier failure; the operation cannot finish",
             primitive_);
    DeviceGuard guard(comm_->device);
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) {
      done_ = true;
      buffers_.clear();
      return true;
    }
    if (status != cudaErrorNotReady) check(status, fmt::format("nccl {} (cudaEventQuery)", primitive_));
    // Not finished: a peer's failure shows up here, not on the event.
    ncclResult_t async_error = ncclSuccess;
    check(ncclCommGetAsyncError(comm_->comm, &async_error), "ncclCommGetAsyncError");
    if (async_error != ncclSuccess && async_error != ncclInProgress) {
      comm_->abort();
      check(async_error, fmt::format("nccl {} on rank {} of {} (asynchronous error; communicator aborted)", primitive_,
                                     comm_->rank, comm_->size));
    }
    return false;
  }

  // cudaEventSynchronize cannot time out, so the event is polled: spinning briefly (short
  // collectives finish in microseconds), then sleeping with a growing pause up to 1 ms.
  void wait() override {
    const auto timeout = watchdog_timeout();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::chrono::microseconds pause{1};
    while (!test()) {
      if (std::chrono::steady_clock::now() > deadline) expire(timeout);
      if (pause.count() < 8) std::this_thread::yield();
      else std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds{1000});
    }
  }

 private:
  [[noreturn]] void expire(std::chrono::milliseconds timeout) {
    comm_->abort();
    const std::string message = fmt::format(
        "watchdog: nccl {} on group '{}' (group rank {} of {}, cuda:{}) did not complete within {:g} s; the NCCL "
        "communicator was aborted. A rank of the group skipped, reordered or never reached this call, or an "
        "isend/irecv pair must be a sendrecv (NCCL P2P cannot buffer large messages). WF_COMM_TIMEOUT sets the "
        "limit in seconds",
        CallLabel::current_or(primitive_), comm_->group, comm_->rank, comm_->size, comm_->device,
        static_cast<double>(timeout.count()) / 1000.0);
    if (Runtime::initialized()) Runtime::get().abort(message);
    WF_FAIL("{}", message);
  }


  std::shared_ptr<NcclComm> comm_;
  const char* primitive_;
  cudaEvent_t event_;
  std::vector<Tensor> buffers_;
  bool done_ = false;
};

}  // namespace

NcclComm::~NcclComm() {
  // Status codes are ignored: a destructor cannot throw, and at process exit the CUDA runtime
  // may already be unloading.
  if (comm && !aborted) ncclCommDestroy(comm);
  if (stream) cudaStreamDestroy(stream);
  if (scratch) cudaFree(scratch);
}

void NcclComm::abort() noexcept {
  if (aborted.exchange(true)) return;
  if (comm) ncclCommAbort(comm);
}

NcclBackend::NcclBackend(Group& bootstrap, int device_index) : comm_(std::make_shared<NcclComm>()) {
  NcclComm& c = *comm_;
  c.group = bootstrap.name();
  c.device = device_index;
  c.rank = bootstrap.rank();
  c.size = bootstrap.size();

  // Every rank first checks that it can take part, and rank 0 creates the id. The outcome is
  // shared before anyone enters ncclCommInitRank, which would otherwise wait forever for a
  // rank that already failed.
  std::string failure;
  ncclUniqueId id{};
  try {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    WF_CHECK(device_index >= 0 && device_index < count, "device cuda:{} does not exist ({} visible)", device_index,
             count);
    if (c.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  } catch (const wf::Error& e) {
    failure = e.what();
  }
  const Tensor ok = Tensor::full({1}, failure.empty() ? 1.0 : 0.0, DType::u8);
  const Tensor all_ok = bootstrap.all_gather(ok);
  std::vector<int> failed_ranks;
  for (int r = 0; r < c.size; ++r)
    if (all_ok.at(r) == 0.0) failed_ranks.push_back(r);
  WF_CHECK(failed_ranks.empty(), "creating the NCCL communicator of group '{}' on cuda:{} failed on rank(s) {}{}",
           bootstrap.name(), device_index, fmt::join(failed_ranks, ", "),
           failure.empty() ? std::string() : fmt::format("; on this rank: {}", failure));

  Tensor id_bytes = Tensor::empty({static_cast<std::int64_t>(sizeof id)}, DType::u8);
  std::memcpy(id_bytes.raw_data(), &id, sizeof id);
  bootstrap.broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.raw_data(), sizeof id);

  DeviceGuard guard(device_index);
  check(cudaStreamCreate(&c.stream), "cudaStreamCreate");  // blocking: ordered after the legacy default stream
  check(cudaMalloc(reinterpret_cast<void**>(&c.scratch), sizeof(float)), "cudaMalloc (barrier buffer)");
  check(ncclCommInitRank(&c.comm, c.size, id, c.rank),
        fmt::format("ncclCommInitRank (group '{}', rank {} of {}, cuda:{})", bootstrap.name(), c.rank, c.size,
                    device_index));
}

Request NcclBackend::enqueue(const char* primitive, const Launch& launch, std::vector<Tensor> buffers) {
  NcclComm& c = *comm_;
  WF_CHECK(!c.aborted,
           "nccl {}: this NCCL communicator was aborted by an earlier timeout or error; create a new backend for the "
           "group",
           primitive);
  DeviceGuard guard(c.device);
  launch(c.comm, c.stream);
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), fmt::format("nccl {} (cudaEventCreate)", primitive));
  const cudaError_t recorded = cudaEventRecord(event, c.stream);
  if (recorded != cudaSuccess) cudaEventDestroy(event);
  check(recorded, fmt::format("nccl {} (cudaEventRecord)", primitive));
  return Request(std::make_shared<NcclRequest>(comm_, primitive, event, std::move(buffers)));
}

void NcclBackend::check_peer(const char* primitive, int peer) const {
  WF_CHECK(peer >= 0 && peer < size(), "nccl {}: peer {} is outside the group's ranks [0, {})", primitive, peer,
           size());
}

// ---- point to point ---------------------------------------------------------------------
// NCCL has no tags (messages between two ranks match in issue order), so `tag` is unused.

Request NcclBackend::isend(const Tensor& t, int peer, int /*tag*/) {
  check_peer("send", peer);
  const void* data = device_data(t, comm_->device, "send", "send");
  const ncclDataType_t dtype = nccl_dtype(t.dtype(), "send");
  const auto count = static_cast<std::size_t>(t.numel());
  return enqueue(
      "send", [&](ncclComm_t comm, cudaStream_t stream) { check(ncclSend(data, count, dtype, peer, comm, stream), "ncclSend"); },
      {t});
}

Request NcclBackend::irecv(Tensor& t, int peer, int /*tag*/) {
  check_peer("recv", peer);
  void* data = device_data(t, comm_->device, "recv", "receive");
  const ncclDataType_t dtype = nccl_dtype(t.dtype(), "recv");
  const auto count = static_cast<std::size_t>(t.numel());
  return enqueue(
      "recv", [&](ncclComm_t comm, cudaStream_t stream) { check(ncclRecv(data, count, dtype, peer, comm, stream), "ncclRecv"); },
      {t});
}

void NcclBackend::send(const Tensor& t, int peer, int tag) { isend(t, peer, tag).wait(); }
void NcclBackend::recv(Tensor& t, int peer, int tag) { irecv(t, peer, tag).wait(); }

Request NcclBackend::isendrecv(const Tensor& send, int dst, Tensor& recv, int src) {
  check_peer("sendrecv", dst);
  check_peer("sendrecv", src);
  const void* send_data = device_data(send, comm_->device, "sendrecv", "send");
  void* recv_data = device_data(recv, comm_->device, "sendrecv", "receive");
  const ncclDataType_t send_dtype = nccl_dtype(send.dtype(), "sendrecv");
  const ncclDataType_t recv_dtype = nccl_dtype(recv.dtype(), "sendrecv");
  const auto send_count = static_cast<std::size_t>(send.numel());
  const auto recv_count = static_cast<std::size_t>(recv.numel());
  return enqueue(
      "sendrecv",
      [&](ncclComm_t comm, cudaStream_t stream) {
        // One group: NCCL posts both halves together, so ranks that all send first cannot block
        // each other (separate, unpaired P2P calls can).
        grouped("sendrecv", [&] {
          check(ncclSend(send_data, send_count, send_dtype, dst, comm, stream), "ncclSend (sendrecv)");
          check(ncclRecv(recv_data, recv_count, recv_dtype, src, comm, stream), "ncclRecv (sendrecv)");
        });
      },
      {send, recv});
}

void NcclBackend::sendrecv(const Tensor& send, int dst, Tensor& recv, int src, int /*tag*/) {
  isendrecv(send, dst, recv, src).wait();
}

// ---- collectives ------------------------------------------------------------------------

Request NcclBackend::iall_reduce(Tensor& t, ReduceOp op) {
  void* data = device_data(t, comm_->device, "all_reduce", "input/output");
  const ncclDataType_t dtype = nccl_dtype(t.dtype(), "all_reduce");
  const auto count = static_cast<std::size_t>(t.numel());
  return enqueue(
      "all_reduce",
      [&](ncclComm_t comm, cudaStream_t stream) {
        check(ncclAllReduce(data, data, count, dtype, nccl_op(op), comm, stream), "ncclAllReduce");
      },
      {t});
}

void NcclBackend::all_reduce(Tensor& t, ReduceOp op) { iall_reduce(t, op).wait(); }

Request NcclBackend::iall_gather(const Tensor& input, Tensor& output) {
  const void* in = device_data(input, comm_->device, "all_gather", "input");
  void* out = device_data(output, comm_->device, "all_gather", "output");
  check_same_dtype("all_gather", input, output);
  WF_CHECK(output.numel() == input.numel() * size(),
           "nccl all_gather: the output {} must hold {} ranks × the input {} elements", shape_str(output.shape()),
           size(), shape_str(input.shape()));
  const ncclDataType_t dtype = nccl_dtype(input.dtype(), "all_gather");
  const auto count = static_cast<std::size_t>(input.numel());
  return enqueue(
      "all_gather",
      [&](ncclComm_t comm, cudaStream_t stream) {
        check(ncclAllGather(in, out, count, dtype, comm, stream), "ncclAllGather");
      },
      {input, output});
}

void NcclBackend::all_gather(const Tensor& input, Tensor& output) { iall_gather(input, output).wait(); }

void NcclBackend::all_gather_v(const Tensor& input, Tensor& output, const std::vector<std::int64_t>& rows) {
  const char* in = static_cast<const char*>(device_data(input, comm_->device, "all_gather_v", "input"));
  char* out = static_cast<char*>(device_data(output, comm_->device, "all_gather_v", "output"));
  check_same_dtype("all_gather_v", input, output);
  WF_CHECK(input.dim() > 0 && output.dim() == input.dim() && static_cast<int>(rows.size()) == size(),
           "nccl all_gather_v: needs input and output of the same rank ≥ 1 and one row count per rank; got input {}, "
           "output {}, {} row counts for {} ranks",
           shape_str(input.shape()), shape_str(output.shape()), rows.size(), size());
  const std::int64_t row_elements = shape_numel(Shape(input.shape().begin() + 1, input.shape().end()));
  std::int64_t total_rows = 0;
  for (const std::int64_t r : rows) {
    WF_CHECK(r >= 0, "nccl all_gather_v: negative row count {} in {}", r, fmt::join(rows, ", "));
    total_rows += r;
  }
  WF_CHECK(input.size(0) == rows[rank()] && output.numel() == total_rows * row_elements,
           "nccl all_gather_v: this rank's input {} must have rows[{}] = {} rows and the output {} the sum of all "
           "rows ({}) × {} elements",
           shape_str(input.shape()), rank(), rows[rank()], shape_str(output.shape()), total_rows, row_elements);
  const ncclDataType_t dtype = nccl_dtype(input.dtype(), "all_gather_v");
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements) * dtype_size(input.dtype());
  run("all_gather_v", [&](ncclComm_t comm, cudaStream_t stream) {
    // Rank r's piece is a broadcast rooted at r into its place in the output.
    grouped("all_gather_v", [&] {
      std::size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const auto count = static_cast<std::size_t>(rows[r] * row_elements);
        check(ncclBroadcast(in, out + offset, count, dtype, r, comm, stream), "ncclBroadcast (all_gather_v)");
        offset += static_cast<std::size_t>(rows[r]) * row_bytes;
      }
    });
  });
}

Request NcclBackend::ireduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  const void* in = device_data(input, comm_->device, "reduce_scatter", "input");
  void* out = device_data(output, comm_->device, "reduce_scatter", "output");
  check_same_dtype("reduce_scatter", input, output);
  WF_CHECK(input.numel() == output.numel() * size(),
           "nccl reduce_scatter: the input {} must hold {} ranks × the output {} elements", shape_str(input.shape()),
           size(), shape_str(output.shape()));
  const ncclDataType_t dtype = nccl_dtype(input.dtype(), "reduce_scatter");
  const auto count = static_cast<std::size_t>(output.numel());
  return enqueue(
      "reduce_scatter",
      [&](ncclComm_t comm, cudaStream_t stream) {
        check(ncclReduceScatter(in, out, count, dtype, nccl_op(op), comm, stream), "ncclReduceScatter");
      },
      {input, output});
}

void NcclBackend::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  ireduce_scatter(input, output, op).wait();
}

void NcclBackend::all_to_all(const Tensor& input, Tensor& output) {
  const char* in = static_cast<const char*>(device_data(input, comm_->device, "all_to_all", "input"));
  char* out = static_cast<char*>(device_data(output, comm_->device, "all_to_all", "output"));
  check_same_dtype("all_to_all", input, output);
  WF_CHECK(input.numel() == output.numel() && input.numel() % size() == 0,
           "nccl all_to_all: input {} and output {} must have the same number of elements, divisible by the {} ranks",
           shape_str(input.shape()), shape_str(output.shape()), size());
  const ncclDataType_t dtype = nccl_dtype(input.dtype(), "all_to_all");
  const auto count = static_cast<std::size_t>(input.numel() / size());
  const std::size_t chunk_bytes = count * dtype_size(input.dtype());
  run("all_to_all", [&](ncclComm_t comm, cudaStream_t stream) {
    // Chunk p goes to rank p and chunk p of the output comes from rank p (including this rank:
    // NCCL handles a send to self inside a group).
    grouped("all_to_all", [&] {
      for (int p = 0; p < size(); ++p) {
        check(ncclSend(in + p * chunk_bytes, count, dtype, p, comm, stream), "ncclSend (all_to_all)");
        check(ncclRecv(out + p * chunk_bytes, count, dtype, p, comm, stream), "ncclRecv (all_to_all)");
      }
    });
  });
}

void NcclBackend::broadcast(Tensor& t, int root) {
  check_peer("broadcast", root);
  void* data = device_data(t, comm_->device, "broadcast", "input/output");
  const ncclDataType_t dtype = nccl_dtype(t.dtype(), "broadcast");
  const auto count = static_cast<std::size_t>(t.numel());
  run("broadcast", [&](ncclComm_t comm, cudaStream_t stream) {
    check(ncclBroadcast(data, data, count, dtype, root, comm, stream), "ncclBroadcast");
  });
}

// NCCL has no barrier: an all-reduce of one element, waited for, is one.
void NcclBackend::barrier() {
  float* scratch = comm_->scratch;
  run("barrier", [&](ncclComm_t comm, cudaStream_t stream) {
    check(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce (barrier)");
  });
}

// ---- factory ----------------------------------------------------------------------------

bool nccl_available() { return true; }

std::shared_ptr<Backend> make_nccl_backend(Group& cpu_group_for_bootstrap, int device_index) {
  return std::make_shared<NcclBackend>(cpu_group_for_bootstrap, device_index);
}

}  // namespace wf::comm

#else  // no CUDA or no NCCL in this build

namespace wf::comm {

bool nccl_available() { return false; }

std::shared_ptr<Backend> make_nccl_backend(Group& cpu_group_for_bootstrap, int device_index) {
  WF_FAIL("cannot create an NCCL backend for group '{}' on cuda:{}: {}", cpu_group_for_bootstrap.name(), device_index,
          WF_HAVE_CUDA ? "the CUDA toolkit was found but NCCL was not; set NCCL_ROOT to the NCCL installation and "
                         "reconfigure"
                       : "this build has no CUDA backend; configure with a CUDA toolkit and NCCL (-DWF_CUDA=ON)");
}

}  // namespace wf::comm

#endif
