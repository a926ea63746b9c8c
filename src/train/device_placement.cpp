#include "wallfacer/train/device_placement.h"

#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/comm/runtime.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"

namespace wf::train {
namespace {

void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  const Tensor moved = t.detach().to(device);
  TensorImpl* impl = t.impl();
  impl->storage = moved.impl()->storage;
  impl->offset = moved.storage_offset();
  if (impl->autograd) impl->autograd->grad = Tensor();  // a gradient of the old place is no gradient here
}

}  // namespace

Device resolve_train_device(Device configured) {
  const bool automatic = configured == config::kAutoDevice;
  if (!configured.is_cuda()) return configured;
  std::string why;
  const std::vector<std::string> gpus = cuda_devices(&why);
  if (gpus.empty()) {
    WF_USER_CHECK(automatic, "train.device is cuda, but no CUDA GPU is visible to this process ({}); set "
                  "train.device: cpu, or auto to use a GPU only where there is one", why);
    return Device::cpu();
  }
  if (comm::Runtime::initialized() && comm::Runtime::get().device().is_cuda()) return comm::Runtime::get().device();
  return Device::cuda(0);
}

void move_to_device(nn::Module& module, Device device) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : module.named_parameters()) move_in_place(t, device);
  for (const auto& [name, t] : module.named_buffers()) move_in_place(t, device);
}

models::Batch batch_on(const models::Batch& batch, Device device) {
  models::Batch moved;
  moved.set_documents(batch.documents());
  for (const std::string& name : batch.names()) moved.set(name, batch.at(name).to(device));
  return moved;
}

Tensor read_to_host(const Tensor& t) {
  if (t.device().is_cpu()) {
    detail::count_host_sync();
    return t;
  }
  return t.to(Device::cpu());  // counts itself
}

}  // namespace wf::train
