// The NCCL transport (nccl_backend.h) and its factories (wallfacer/comm/nccl.h). Everything that
// touches CUDA or NCCL is compiled only when both were found; other builds get factories that say
// why there is none and what to use instead.
#include "src/comm/nccl_backend.h"

#include <fmt/format.h>

#include <string>

#include "wallfacer/comm/group.h"
#include "wallfacer/comm/nccl.h"
#include "wallfacer/core/error.h"

#if WF_HAVE_CUDA && WF_HAVE_NCCL

#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "src/comm/watchdog.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/cuda/cuda_devices.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/log.h"

namespace wf::comm {
namespace {

// NCCL's name for `status` and the last error it logged (its own words on what went wrong).
std::string nccl_message(ncclResult_t status) {
  const char* detail = ncclGetLastError(nullptr);  // the argument is unused by NCCL
  const bool has_detail = detail != nullptr && *detail != '\0';
  return fmt::format("{}{}{}", ncclGetErrorString(status), has_detail ? ": " : "", has_detail ? detail : "");
}

const char* nccl_hint(ncclResult_t status) {
  return status == ncclRemoteError
             ? "; a peer process failed or its network link dropped: the first error on another rank says why"
             : "; NCCL_DEBUG=WARN prints NCCL's own diagnosis";
}

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  WF_FAIL("nccl: dtype {} has no NCCL equivalent", dtype_name(dtype));
}

// A device tensor's raw_data() is its device address; NCCL takes non-const pointers for outputs.
void* device_address(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

std::size_t count_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; NCCL_COMM_BLOCKING=1 in the environment overrides it
  return config;
}

// A non-blocking communicator's state once it has left ncclInProgress (the call that put it there
// has finished on NCCL's thread), polled with the watchdog's back-off. When it has not within
// watchdog_timeout(), `on_timeout` aborts the communicator (so that no kernel or NCCL thread stays
// stuck) and the job ends with the watchdog's message naming `site`.
ncclResult_t settle(ncclComm_t comm, const CallSite& site, const std::function<void()>& on_timeout) {
  ncclResult_t state = ncclInProgress;
  wait_until(
      site,
      [&] {
        const ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
        if (queried != ncclSuccess) state = queried;
        return state != ncclInProgress;
      },
      on_timeout);
  return state;
}

// The steps every rank of `group` takes before ncclCommInitRankConfig, which would wait until the
// watchdog for a rank that already failed: each checks that it can take part, the ranks compare
// notes, so that a failure anywhere is the same wf::Error on every rank, and rank 0's ncclUniqueId
// is broadcast. Both exchanges use the group's MPI backend directly: they are setup, not traffic.
ncclUniqueId agree_on_communicator(Group& group, int device_index) {
  // Each rank's record: whether it can take part, then its GPU's UUID (the same for two ranks on
  // one GPU, whatever CUDA_VISIBLE_DEVICES numbers it, and different across machines).
  constexpr std::int64_t kUuidBytes = sizeof(cudaUUID_t);
  constexpr std::int64_t kRecord = 1 + kUuidBytes;
  std::string failure;
  cudaUUID_t uuid{};
  ncclUniqueId id{};
  try {
    detail::check_cuda_device(Device::cuda(device_index));
    cudaDeviceProp properties{};
    const cudaError_t status = cudaGetDeviceProperties(&properties, device_index);
    WF_CHECK(status == cudaSuccess, "cudaGetDeviceProperties(cuda:{}) failed: {}", device_index,
             cudaGetErrorString(status));
    uuid = properties.uuid;
    if (group.rank() == 0) {
      const ncclResult_t made = ncclGetUniqueId(&id);
      WF_CHECK(made == ncclSuccess, "ncclGetUniqueId failed: {}{}", nccl_message(made), nccl_hint(made));
    }
  } catch (const std::exception& e) {
    cudaGetLastError();  // a failed CUDA call must not be reported again by the next one
    failure = e.what();
  }

  Tensor mine = Tensor::zeros({1, kRecord}, DType::u8);
  auto* record = static_cast<unsigned char*>(mine.raw_data());
  record[0] = failure.empty() ? 1 : 0;
  std::memcpy(record + 1, uuid.bytes, kUuidBytes);
  Tensor all = Tensor::empty({group.size(), kRecord}, DType::u8);
  {
    const CallLabel label("NCCL communicator setup (can every rank take part?)");
    group.cpu_backend().all_gather(mine, all);
  }
  const auto* records = static_cast<const unsigned char*>(all.raw_data());
  std::vector<int> failed;
  for (int r = 0; r < group.size(); ++r) {
    if (records[r * kRecord] == 0) failed.push_back(r);
  }
  WF_CHECK(failed.empty(), "creating the NCCL communicator of group '{}' on cuda:{} failed on group rank(s) {}{}",
           group.name(), device_index, fmt::join(failed, ", "),
           failure.empty() ? std::string() : fmt::format("; on this rank: {}", failure));
  for (int r = 1; r < group.size(); ++r) {
    for (int s = 0; s < r; ++s) {
      WF_USER_CHECK(std::memcmp(records + r * kRecord + 1, records + s * kRecord + 1, kUuidBytes) != 0,
                    "group '{}': group ranks {} and {} are on the same GPU, and NCCL refuses two ranks of one "
                    "communicator on one GPU; give each rank a GPU of its own, or set comm.gpu_transport: staged "
                    "(MPI through pinned host memory, which serves ranks that share a GPU)",
                    group.name(), s, r);
    }
  }

  Tensor id_bytes = Tensor::empty({static_cast<std::int64_t>(sizeof id)}, DType::u8);
  std::memcpy(id_bytes.raw_data(), &id, sizeof id);
  {
    const CallLabel label("NCCL communicator setup (ncclUniqueId)");
    group.cpu_backend().broadcast(id_bytes, 0);
  }
  std::memcpy(&id, id_bytes.raw_data(), sizeof id);
  return id;
}

// A ready communicator over the ranks of `group` (collective over the group).
ncclComm_t init_communicator(Group& group, int device_index) {
  const ncclUniqueId id = agree_on_communicator(group, device_index);
  detail::cuda_set_device(Device::cuda(device_index));  // NCCL binds the communicator to the current device
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  ncclResult_t status = ncclCommInitRankConfig(&comm, group.size(), id, group.rank(), &config);
  if (status == ncclInProgress && comm != nullptr) {
    const CallSite site{group.name(), "ncclCommInitRankConfig", group.rank(), group.size()};
    status = settle(comm, site, [comm] { ncclCommAbort(comm); });
  }
  if (status != ncclSuccess) {
    const std::string message = nccl_message(status);
    if (comm != nullptr) ncclCommAbort(comm);
    WF_FAIL("creating the NCCL communicator of group '{}' (group rank {} of {}, cuda:{}) failed in "
            "ncclCommInitRankConfig: {}{}",
            group.name(), group.rank(), group.size(), device_index, message, nccl_hint(status));
  }
  return comm;
}

// The communicator every group of a grid is split from: one per world group and device in a
// process, made on first use and never destroyed. It runs no operation of its own, and destroying
// it at exit would race the CUDA runtime's own teardown; the driver releases it with the process.
ncclComm_t world_communicator(Group& world, int device_index) {
  static std::mutex mutex;
  static auto* communicators = new std::map<std::pair<std::vector<int>, int>, ncclComm_t>();
  std::lock_guard lock(mutex);
  auto key = std::make_pair(world.world_ranks(), device_index);
  auto it = communicators->find(key);
  if (it == communicators->end()) {
    it = communicators->emplace(std::move(key), init_communicator(world, device_index)).first;
  }
  return it->second;
}

// `group`'s communicator, split from `parent` (collective over the parent's ranks). A split is the
// parent's call in progress (its state, polled first); then the new communicator's own state.
ncclComm_t split_communicator(ncclComm_t parent, Group& group, int color, int device_index) {
  detail::cuda_set_device(Device::cuda(device_index));
  ncclConfig_t config = nonblocking_config();
  // NCCL stores the new communicator from its own thread once the split is done: a cell that
  // outlives a failed split (then leaked, a few bytes) keeps a late store harmless.
  auto* cell = new ncclComm_t(nullptr);
  const CallSite site{group.name(), "ncclCommSplit", group.rank(), group.size()};
  ncclResult_t status = ncclCommSplit(parent, color, group.rank(), cell, &config);
  if (status == ncclInProgress) status = settle(parent, site, [parent] { ncclCommAbort(parent); });
  ncclComm_t comm = nullptr;
  if (status == ncclSuccess) {
    comm = *cell;
    delete cell;
    if (comm != nullptr) status = settle(comm, site, [comm] { ncclCommAbort(comm); });
  }
  if (status != ncclSuccess || comm == nullptr) {
    const std::string message = status != ncclSuccess ? nccl_message(status) : "NCCL made no communicator";
    if (comm != nullptr) ncclCommAbort(comm);
    WF_FAIL("creating the NCCL communicator of group '{}' (group rank {} of {}, cuda:{}) failed in ncclCommSplit "
            "(color {}): {}{}",
            group.name(), group.rank(), group.size(), device_index, color, message, nccl_hint(status));
  }
  // NCCL orders a split's ranks by key as MPI does; checked as CommGrid checks MPI's groups.
  int count = 0, rank = -1;
  const bool known = ncclCommCount(comm, &count) == ncclSuccess && ncclCommUserRank(comm, &rank) == ncclSuccess;
  if (!known || count != group.size() || rank != group.rank()) {
    ncclCommAbort(comm);
    WF_FAIL("ncclCommSplit made group '{}' a communicator of {} ranks with this one as rank {}, but the group has "
            "{} ranks with this one as rank {}",
            group.name(), count, rank, group.size(), group.rank());
  }
  return comm;
}

}  // namespace

NcclBackend::NcclBackend(std::string group_name, int rank, int size, int device_index, ncclComm_t comm,
                         Stream stream)
    : StreamBackend(std::move(group_name), rank, size, Device::cuda(device_index), stream), comm_(comm) {}

NcclBackend::~NcclBackend() {
  if (aborted_) return;  // ncclCommAbort has freed it
  // The operations queued on the comm stream may still use the communicator: destroy it once the
  // stream is idle. While an exception unwinds, or when the stream does not drain (a peer never
  // came), abort instead, so that no kernel stays stuck and the waits after this one end.
  bool idle = false;
  if (std::uncaught_exceptions() == 0) {
    try {
      const Stream& stream = this->stream();  // its own (a pipeline edge's), not always comm_stream
      const auto deadline = std::chrono::steady_clock::now() + watchdog_timeout();
      while (!(idle = stream.query()) && std::chrono::steady_clock::now() < deadline) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } catch (const std::exception& e) {
      log::warn("nccl: group '{}': checking its last operations before destroying the communicator failed: {}",
                group_name(), e.what());
      idle = false;
    }
  }
  if (!idle) {
    abort();
    return;
  }
  const ncclResult_t destroyed = ncclCommDestroy(comm_);
  if (destroyed != ncclSuccess) {
    log::warn("nccl: group '{}': ncclCommDestroy failed: {}", group_name(), nccl_message(destroyed));
  }
}

void NcclBackend::abort() noexcept {
  if (aborted_.exchange(true)) return;
  ncclCommAbort(comm_);  // its status says nothing more can be done with the communicator
}

void NcclBackend::check_async_error() {
  WF_CHECK(!aborted_,
           "nccl on group '{}' (group rank {} of {}): the communicator was aborted after an earlier failure or "
           "timeout (its last call: {}); nothing more can run on it: restart the job",
           group_name(), rank(), size(), last_call_.load());
  ncclResult_t state = ncclSuccess;
  const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
  if (queried != ncclSuccess) state = queried;
  if (state == ncclSuccess || state == ncclInProgress) return;
  fail(fmt::format("{} (an asynchronous error, reported after it)", last_call_.load()), state);
}

void NcclBackend::fail(std::string_view what, ncclResult_t status) {
  const std::string message = nccl_message(status);  // before the abort, which may log more
  abort();
  WF_FAIL("nccl {} on group '{}' (group rank {} of {}, cuda:{}) failed: {}; the communicator was aborted{}", what,
          group_name(), rank(), size(), device().index, message, nccl_hint(status));
}

void NcclBackend::call(const char* what, const Stream& stream, const Issue& issue) {
  WF_CHECK(!aborted_,
           "nccl {} on group '{}': the communicator was aborted after an earlier failure or timeout; nothing more "
           "can run on it: restart the job",
           what, group_name());
  last_call_ = what;
  const cudaStream_t native = detail::cuda_stream(stream);  // also makes the stream's device current
  ncclResult_t status = issue(native);
  if (status == ncclInProgress) {
    const CallSite site{group_name(), what, rank(), size()};
    status = settle(comm_, site, [this] { abort(); });
  }
  if (status != ncclSuccess) fail(what, status);
}

ncclRedOp_t NcclBackend::reduction(ReduceOp op, DType dtype, const char* primitive) const {
  WF_CHECK(dtype != DType::u8,
           "nccl {} on group '{}': u8 tensors hold bytes, not numbers, and are never reduced; reduce an i32 or f32 "
           "copy (x.to(DType::i32))",
           primitive, group_name());
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;
  }
  WF_FAIL("nccl {} on group '{}': unknown reduce op {}", primitive, group_name(), static_cast<int>(op));
}

// ---- operations ----------------------------------------------------------------------------
// Empty tensors move nothing: the call is skipped on every rank alike (the ranks agree on shapes).

void NcclBackend::issue_p2p(const Stream& comm, const std::vector<P2p>& legs) {
  struct Leg {
    void* data;
    std::size_t count;
    ncclDataType_t dtype;
    int peer;
    bool receive;
  };
  std::vector<Leg> posted;  // converted before the group opens, so that nothing throws inside it
  for (const P2p& leg : legs) {
    if (leg.buffer.numel() == 0) continue;
    posted.push_back({device_address(leg.buffer), count_of(leg.buffer), nccl_dtype(leg.buffer.dtype()), leg.peer,
                      leg.receive});
  }
  if (posted.empty()) return;
  // One group: NCCL posts every leg before any completes, so ranks that all send first cannot
  // block each other (separate sends and receives can).
  call("ncclSend/ncclRecv group", comm, [&](cudaStream_t stream) {
    ncclResult_t status = ncclGroupStart();
    if (status != ncclSuccess) return status;
    for (const Leg& leg : posted) {
      status = leg.receive ? ncclRecv(leg.data, leg.count, leg.dtype, leg.peer, comm_, stream)
                           : ncclSend(leg.data, leg.count, leg.dtype, leg.peer, comm_, stream);
      if (status != ncclSuccess && status != ncclInProgress) break;
    }
    const ncclResult_t ended = ncclGroupEnd();  // always: a failed leg must not leave the group open
    return status != ncclSuccess && status != ncclInProgress ? status : ended;
  });
}

void NcclBackend::issue_all_reduce(const Stream& comm, const Tensor& t, ReduceOp op, Form /*form*/) {
  const ncclRedOp_t nccl_op = reduction(op, t.dtype(), "all_reduce");
  const ncclDataType_t dtype = nccl_dtype(t.dtype());
  if (t.numel() == 0) return;
  void* data = device_address(t);
  call("ncclAllReduce", comm, [&](cudaStream_t stream) {
    return ncclAllReduce(data, data, count_of(t), dtype, nccl_op, comm_, stream);
  });
}

void NcclBackend::issue_all_gather(const Stream& comm, const Tensor& input, const Tensor& output, Form /*form*/) {
  const ncclDataType_t dtype = nccl_dtype(input.dtype());
  if (input.numel() == 0) return;
  call("ncclAllGather", comm, [&](cudaStream_t stream) {
    return ncclAllGather(device_address(input), device_address(output), count_of(input), dtype, comm_, stream);
  });
}

void NcclBackend::issue_reduce_scatter(const Stream& comm, const Tensor& input, const Tensor& output, ReduceOp op,
                                       Form /*form*/) {
  const ncclRedOp_t nccl_op = reduction(op, input.dtype(), "reduce_scatter");
  const ncclDataType_t dtype = nccl_dtype(input.dtype());
  if (output.numel() == 0) return;
  call("ncclReduceScatter", comm, [&](cudaStream_t stream) {
    return ncclReduceScatter(device_address(input), device_address(output), count_of(output), dtype, nccl_op, comm_,
                             stream);
  });
}

void NcclBackend::issue_broadcast(const Stream& comm, const Tensor& t, int root) {
  const ncclDataType_t dtype = nccl_dtype(t.dtype());
  if (t.numel() == 0) return;
  void* data = device_address(t);
  call("ncclBroadcast", comm, [&](cudaStream_t stream) {
    return ncclBroadcast(data, data, count_of(t), dtype, root, comm_, stream);
  });
}

// ---- factories -----------------------------------------------------------------------------

bool nccl_available() { return true; }

std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index) {
  return make_nccl_backend(group, device_index, comm_stream(Device::cuda(device_index)));
}

std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index, const Stream& stream) {
  const ncclComm_t comm = init_communicator(group, device_index);
  return std::make_shared<NcclBackend>(group.name(), group.rank(), group.size(), device_index, comm, stream);
}

std::shared_ptr<Backend> split_nccl_backend(Group& world, Group& group, int color, int device_index) {
  WF_CHECK(color >= 0, "split_nccl_backend: group '{}' has color {}; colors are non-negative", group.name(), color);
  const ncclComm_t parent = world_communicator(world, device_index);
  const ncclComm_t comm = split_communicator(parent, group, color, device_index);
  return std::make_shared<NcclBackend>(group.name(), group.rank(), group.size(), device_index, comm,
                                       comm_stream(Device::cuda(device_index)));
}

}  // namespace wf::comm

#else  // no CUDA or no NCCL in this build

namespace wf::comm {
namespace {

[[noreturn]] void fail_without_nccl(const Group& group, int device_index) {
  WF_USER_FAIL("cannot create an NCCL communicator for group '{}' on cuda:{}: {}; or set comm.gpu_transport: staged "
               "to move GPU tensors through pinned host memory over MPI",
               group.name(), device_index,
               WF_HAVE_CUDA ? "this build found the CUDA toolkit but not NCCL; set NCCL_ROOT to the NCCL "
                              "installation and reconfigure"
                            : "this build has no CUDA backend; configure with a CUDA toolkit and NCCL (-DWF_CUDA=ON)");
}

}  // namespace

bool nccl_available() { return false; }

std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index) { fail_without_nccl(group, device_index); }

std::shared_ptr<Backend> make_nccl_backend(Group& group, int device_index, const Stream& /*stream*/) {
  fail_without_nccl(group, device_index);
}

std::shared_ptr<Backend> split_nccl_backend(Group& /*world*/, Group& group, int /*color*/, int device_index) {
  fail_without_nccl(group, device_index);
}

}  // namespace wf::comm

#endif
