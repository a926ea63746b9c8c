#pragma once
// The CUDA backend's state per device, made on the device's first use (never at static
// initialisation or registration, so a CPU-only run of a CUDA build never touches the driver):
// its main stream, its memory pool, and the event that joins two of its streams.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "wallfacer/core/device.h"

namespace wf::detail {

struct CudaDeviceState {
  int index = 0;
  cudaStream_t main = nullptr;  // Stream handle 0: non-blocking, made here, never destroyed
  cudaMemPool_t pool = nullptr;  // where this device's tensors live (src/core/cuda/cuda_memory.cpp)
  int multiprocessors = 0;
  int compute_capability = 0;  // major * 10 + minor
  std::size_t total_memory = 0;
  std::mutex join_mutex;        // held from the record of `join` to the wait on it
  cudaEvent_t join = nullptr;
};

// The state of `device`, made on first use, with the device made current on this thread.
// wf::Error when the device is not a CUDA device or no such GPU is visible.
CudaDeviceState& cuda_device_state(Device device);
// Calls f for each device whose state exists (making none, and leaving the current device as it
// is: f uses only calls that name their device, stream or pool).
void for_each_started_cuda_device(const std::function<void(CudaDeviceState&)>& f);

// Work queued on `waiter` from now on waits for the work queued on `producer` so far (both
// streams of `state`'s device); the host does not wait. Nothing when they are one stream.
void cuda_join(CudaDeviceState& state, cudaStream_t producer, cudaStream_t waiter);

// wf::Error naming `device` when no CUDA GPU is visible or device.index is not one of them.
void check_cuda_device(Device device);

// The release threshold of every device's pool (the allocator's cache limit): freed memory up to
// this many bytes stays reserved across synchronisations. UINT64_MAX (keep everything) by default.
std::uint64_t cuda_pool_release_threshold();
void set_cuda_pool_release_threshold(std::uint64_t bytes);

}  // namespace wf::detail
