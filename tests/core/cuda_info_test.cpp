// The CUDA queries answer on every machine: with devices, without a driver, or in a build
// without the CUDA backend. They must never throw or abort.
#include <catch2/catch.hpp>

#include <string>

#include "wallfacer/build_info.h"
#include "wallfacer/core/cuda_info.h"

TEST_CASE("cuda_devices lists devices or says why there are none", "[core]") {
  std::string error;
  const auto devices = wf::cuda_devices(&error);
  if (devices.empty()) {
    CHECK_FALSE(error.empty());
    WARN("no CUDA devices: " << error);
  }
  for (const auto& device : devices) CHECK(device.rfind("cuda:", 0) == 0);

  std::string again;  // a failed query leaves no sticky state behind
  CHECK(wf::cuda_devices(&again) == devices);
  CHECK(again == error);
  CHECK(wf::cuda_devices().size() == devices.size());  // the error pointer is optional
}

TEST_CASE("CUDA versions are reported when the backend is built", "[core]") {
  if (WF_HAVE_CUDA) {
    CHECK_FALSE(wf::cuda_runtime_version().empty());
  } else {
    CHECK(wf::cuda_runtime_version().empty());
    CHECK(wf::cuda_driver_version().empty());
  }
}
