#pragma once
// Where a tensor's storage lives. Every tensor carries one; kernels dispatch on it.
#include <cstdint>
#include <string>
#include <string_view>

namespace wf {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:1"

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace wf
