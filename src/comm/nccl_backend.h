#pragma once
// NcclBackend: the NCCL transport of one group's tensors on one GPU, a StreamBackend
// (stream_backend.h: the ordering by events on the device's communication stream, the buffers kept
// until their operation has run, the host wait under the watchdog). This class only issues the
// NCCL calls on the comm stream's cudaStream_t and watches the communicator. Private to the
// library (it includes the NCCL header); wallfacer/comm/nccl.h creates one.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0), so that no NCCL call can hang
// the host beyond the watchdog: a call that returns ncclInProgress is finishing on a thread of
// NCCL's, and until ncclCommGetAsyncError says the state has left ncclInProgress no other call may
// use the communicator and nothing may be queued on the stream it was given (NCCL may not have
// queued its kernel yet). Every call is therefore followed by that poll, bounded by
// watchdog_timeout(): the operation is on the stream when issue_* returns. An error, returned or
// asynchronous (a peer failed), aborts the communicator (ncclCommAbort, so no kernel stays stuck
// on the GPU) and throws a wf::Error naming the group, the call and NCCL's message; a timed-out
// wait aborts it and ends the job with the watchdog's message.
#include "wallfacer/build_info.h"

#ifndef WF_HAVE_NCCL
#define WF_HAVE_NCCL 0  // set to 1 by the NCCL::nccl target (scripts/cmake/Dependencies.cmake)
#endif

#if WF_HAVE_CUDA && WF_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/comm/stream_backend.h"

namespace wf::comm {

class NcclBackend final : public StreamBackend {
 public:
  // Owns `comm`: a ready communicator (its state no longer ncclInProgress) of `size` ranks in
  // which this process is `rank`, on cuda:`device_index`.
  NcclBackend(std::string group_name, int rank, int size, int device_index, ncclComm_t comm, Stream stream);
  // ncclCommDestroy once the comm stream has run what was queued on it; ncclCommAbort when it
  // does not within watchdog_timeout(), or while an exception unwinds (a peer may never come).
  ~NcclBackend() override;

  std::string name() const override { return "nccl"; }

 protected:
  void issue_p2p(const Stream& comm, const std::vector<P2p>& legs) override;
  void issue_all_reduce(const Stream& comm, const Tensor& t, ReduceOp op, Form form) override;
  void issue_all_gather(const Stream& comm, const Tensor& input, const Tensor& output, Form form) override;
  void issue_reduce_scatter(const Stream& comm, const Tensor& input, const Tensor& output, ReduceOp op,
                            Form form) override;
  void issue_broadcast(const Stream& comm, const Tensor& t, int root) override;
  // ncclCommGetAsyncError; on an error, abort and a wf::Error naming the group, the last call and
  // NCCL's message. Also refuses a communicator aborted earlier.
  void check_async_error() override;
  // ncclCommAbort, once; later calls do nothing.
  void abort() noexcept override;

 private:
  using Issue = std::function<ncclResult_t(cudaStream_t)>;
  // Runs `issue` (one NCCL call, or one group of them) on `stream`'s cudaStream_t and waits for the
  // communicator to leave ncclInProgress; an error aborts and throws (fail).
  void call(const char* what, const Stream& stream, const Issue& issue);
  [[noreturn]] void fail(std::string_view what, ncclResult_t status);
  ncclRedOp_t reduction(ReduceOp op, DType dtype, const char* primitive) const;

  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
  // The last call issued, for an asynchronous error (NCCL does not say which call it comes from).
  std::atomic<const char*> last_call_{"no call yet"};
};

}  // namespace wf::comm

#endif  // WF_HAVE_CUDA && WF_HAVE_NCCL
