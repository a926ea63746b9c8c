#include "wallfacer/core/cuda_info.h"

#include <fmt/format.h>

#include "wallfacer/build_info.h"

#if WF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wf {

#if WF_HAVE_CUDA

namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string version_string(int encoded) { return fmt::format("{}.{}", encoded / 1000, (encoded % 1000) / 10); }
}  // namespace

std::vector<std::string> cuda_devices(std::string* error) {
  std::vector<std::string> devices;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (error) *error = cudaGetErrorString(status);
    cudaGetLastError();  // the failure is reported here; do not leave it sticky for later calls
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    std::string why;
    const std::optional<CudaDeviceInfo> info = cuda_device_info(i, &why);
    if (!info) {
      devices.push_back(fmt::format("cuda:{} (properties unavailable: {})", i, why));
      continue;
    }
    devices.push_back(fmt::format("cuda:{} {} (sm_{}, {:.1f} GiB)", i, info->name, info->compute_capability,
                                  static_cast<double>(info->total_memory) / (1ull << 30)));
  }
  if (devices.empty() && error) *error = "the CUDA runtime reports 0 devices";
  return devices;
}

std::optional<CudaDeviceInfo> cuda_device_info(int index, std::string* error) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    if (error) *error = cudaGetErrorString(cudaGetLastError());  // read, so it is not left sticky
    return std::nullopt;
  }
  return CudaDeviceInfo{prop.name, prop.major * 10 + prop.minor, prop.totalGlobalMem};
}

std::string cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess && v > 0 ? version_string(v) : std::string();
}

std::string cuda_driver_version() {
  int v = 0;  // stays 0 when no driver is installed
  return cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? version_string(v) : std::string();
}

std::string cuda_device_uuid(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the caller only loses the identity
    return {};
  }
  std::string hex;
  for (const char byte : prop.uuid.bytes) hex += fmt::format("{:02x}", static_cast<unsigned char>(byte));
  return fmt::format("GPU-{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4), hex.substr(16, 4),
                     hex.substr(20));
}

#else

constexpr const char* kNoCudaBackend =
    "this build has no CUDA backend (configure with -DWF_CUDA=ON and a CUDA toolkit)";

std::vector<std::string> cuda_devices(std::string* error) {
  if (error) *error = kNoCudaBackend;
  return {};
}
std::optional<CudaDeviceInfo> cuda_device_info(int, std::string* error) {
  if (error) *error = kNoCudaBackend;
  return std::nullopt;
}
std::string cuda_runtime_version() { return {}; }
std::string cuda_driver_version() { return {}; }
std::string cuda_device_uuid(int) { return {}; }

#endif

}  // namespace wf
