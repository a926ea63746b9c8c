#pragma once
// What the CUDA runtime can see on this machine. Safe to call in every build and on machines
// without a GPU or driver: the answers are then empty and `error` says why. Kept out of the
// CUDA headers so that callers (the CLI, test skips) never include them.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace wf {

// One line per visible device, e.g. "cuda:0 NVIDIA H200 (sm_90, 139.8 GiB)". Empty when the
// build has no CUDA backend or the runtime finds no device; `error` (when given) then receives
// the reason ("this build has no CUDA backend", or the runtime's error string).
std::vector<std::string> cuda_devices(std::string* error = nullptr);

// The properties of GPU `index` as the runtime reports them (what a measured cluster file names);
// nullopt when the build has no CUDA backend or the runtime cannot read them (`error`, when given,
// receives why).
struct CudaDeviceInfo {
  std::string name;            // e.g. "NVIDIA H200"
  int compute_capability = 0;  // major * 10 + minor
  std::size_t total_memory = 0;  // bytes
};
std::optional<CudaDeviceInfo> cuda_device_info(int index, std::string* error = nullptr);

// Versions as "major.minor" ("13.0"); empty when the build has no CUDA backend or, for the
// driver, when no driver is installed.
std::string cuda_runtime_version();
std::string cuda_driver_version();

// The UUID of device `index` as NCCL and nvidia-smi identify a GPU ("GPU-" and 32 hex digits with
// its dashes); empty when the build has no CUDA backend or the runtime cannot say. Two ranks on
// one machine whose CUDA_VISIBLE_DEVICES differ both see their GPU as cuda:0: only this tells
// whether it is the same GPU.
std::string cuda_device_uuid(int index);

}  // namespace wf
