#include "src/cli/device_options.h"

#include <chrono>

#include "wallfacer/config/run_config.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/train/device_placement.h"

namespace wf::cli {

void add_device_options(CLI::App& command, std::string& device, std::string& transport, const std::string& what) {
  command
      .add_option("--device", device,
                  what + ": cpu, cuda (each rank on the GPU of its local rank), testdev (the CPU stand-in) or "
                         "auto (cuda where a GPU is visible, else cpu), as train.device")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "testdev", "auto"}));
  command
      .add_option("--transport", transport,
                  "how device tensors travel, as comm.gpu_transport: auto, nccl (the device's own, on its "
                  "communication stream) or staged (MPI through pinned host memory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "nccl", "staged"}));
}

Device resolve_device_option(const std::string& name) {
  const Device configured = name == "auto" ? config::kAutoDevice : Device::parse(name);
  if (configured.is_cuda() && configured != config::kAutoDevice) {
    std::string why;
    WF_USER_CHECK(!cuda_devices(&why).empty(),
                  "--device cuda: no CUDA GPU is visible to this process ({}); use --device cpu or testdev, or auto "
                  "to use a GPU only where there is one",
                  why);
  }
  return train::resolve_train_device(configured);
}

comm::GpuTransport parse_transport_option(const std::string& name) {
  for (comm::GpuTransport t : {comm::GpuTransport::automatic, comm::GpuTransport::nccl, comm::GpuTransport::staged}) {
    if (comm::gpu_transport_name(t) == name) return t;
  }
  WF_USER_FAIL("--transport {}: expected auto, nccl or staged", name);
}

double device_seconds(Device device, const std::function<void()>& fn) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  fn();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace wf::cli
