#pragma once
// Where a tensor's storage lives. Every tensor carries one; kernels dispatch on it.
#include <cstdint>
#include <string>
#include <string_view>

namespace wf {

// `test` is the test device (docs/devices.md): host memory that faults on any access outside its
// own copies and kernels, so that a run on it proves that nothing falls back to the host.
enum class DeviceType : std::uint8_t { cpu, cuda, test };
inline constexpr int kDeviceTypeCount = 3;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device test(int index = 0) { return {DeviceType::test, index}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:1", "testdev", "testdev:1"

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_test() const { return type == DeviceType::test; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda", "testdev": the name of a device type as Device::parse reads it.
const char* device_type_name(DeviceType type);

}  // namespace wf
