#include "wallfacer/core/device.h"

#include <charconv>

#include "wallfacer/core/error.h"

namespace wf {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto digits = text.substr(5);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  WF_FAIL("unknown device '{}': expected 'cpu', 'cuda' or 'cuda:N'", text);
}

}  // namespace wf
