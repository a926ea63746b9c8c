// The registry of kernel backends, one per device type (kernels/backend.h).
#include "kernels/backend.h"

#include <array>
#include <atomic>

#include "kernels/builtin_backends.h"
#include "wallfacer/build_info.h"
#include "wallfacer/core/error.h"

namespace wf::kernels {
namespace {

// The built-in backends are there from the first look-up, so no static initialisation order
// matters; never destroyed, like core's device registry.
struct Registry {
  std::array<std::atomic<Backend*>, kDeviceTypeCount> slots{};
  Registry() {
    slots[static_cast<int>(DeviceType::cpu)].store(&cpu_kernels());
    slots[static_cast<int>(DeviceType::test)].store(&test_device_kernels());
#if WF_HAVE_CUDA
    slots[static_cast<int>(DeviceType::cuda)].store(&cuda_kernels());
#endif
  }
};
Registry& registry() {
  static auto* instance = new Registry();
  return *instance;
}

}  // namespace

DType Backend::attention_operand_dtype(DType activation) const {
  if (activation == DType::bf16 && multiplies_natively(DType::bf16)) return DType::bf16;
  return activation == DType::f64 ? DType::f64 : DType::f32;
}

void Backend::linear_gelu_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                                  std::int64_t out_features, const void* x, const void* weight, const void* bias,
                                  void* pre, void* y) {
  linear_forward(stream, operands, rows, in_features, out_features, x, weight, bias, pre);
  unary_forward(stream, operands == DType::bf16 ? DType::f32 : operands, UnaryOp::gelu, rows * out_features, pre, y);
}

bool Backend::fuses_linear_gelu(DType) const { return false; }

void Backend::linear_add_forward(const Stream& stream, DType operands, std::int64_t rows, std::int64_t in_features,
                                 std::int64_t out_features, const void* x, const void* weight, const void* bias,
                                 const void* residual, void* y) {
  linear_forward(stream, operands, rows, in_features, out_features, x, weight, bias, y);
  // add(residual, linear)'s kernel, in place over y (elementwise: each element is read before it is written).
  const std::vector<std::int64_t> shape{rows, out_features};
  binary_broadcast(stream, operands == DType::bf16 ? DType::f32 : operands, BinaryOp::add, residual, shape, y, shape,
                   y, shape);
}

bool Backend::fuses_linear_add(DType) const { return false; }

Backend& backend_for(Device device) {
  Backend* backend = registry().slots[static_cast<int>(device.type)].load(std::memory_order_acquire);
  WF_CHECK(backend != nullptr, "{}: this build has no kernels for {} devices (built in: cpu, testdev; cuda needs a build with the CUDA "
           "toolkit, -DWF_CUDA=ON); keep tensors on the cpu", device.str(), device_type_name(device.type));
  return *backend;
}

void register_backend(DeviceType type, Backend* backend) {
  WF_CHECK(backend != nullptr, "register_backend: null kernel backend for {}", device_type_name(type));
  registry().slots[static_cast<int>(type)].store(backend, std::memory_order_release);
}

}  // namespace wf::kernels
