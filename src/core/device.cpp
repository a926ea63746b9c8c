#include "wallfacer/core/device.h"

#include <charconv>

#include "wallfacer/core/error.h"

namespace wf {

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::test: return "testdev";
  }
  return "unknown";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("{}:{}", device_type_name(type), index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  for (const DeviceType type : {DeviceType::cuda, DeviceType::test}) {
    const std::string_view name = device_type_name(type);
    if (text == name) return {type, 0};
    if (text.starts_with(name) && text.substr(name.size()).starts_with(':')) {
      int index = -1;
      const auto digits = text.substr(name.size() + 1);
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
      if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return {type, index};
    }
  }
  WF_FAIL("unknown device '{}': expected 'cpu', 'cuda' or 'cuda:N' ('testdev' or 'testdev:N' for the test device)",
          text);
}

}  // namespace wf
