// Exits 0 when a CUDA GPU is visible to this process, 1 (printing why not) otherwise: the check
// tests/skip_unless.sh runs before the GPU tests (tests/CMakeLists.txt).
#include <cstdio>
#include <string>
#include <vector>

#include "wallfacer/core/cuda_info.h"

int main() {
  std::string error;
  const std::vector<std::string> devices = wf::cuda_devices(&error);
  if (devices.empty()) {
    std::printf("no CUDA GPU visible: %s\n", error.c_str());
    return 1;
  }
  for (const std::string& d : devices) std::printf("%s\n", d.c_str());
  return 0;
}
