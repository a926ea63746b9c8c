// Device names: parsing and printing.
#include <catch2/catch.hpp>

#include "wallfacer/core/device.h"
#include "wallfacer/core/error.h"

using Catch::Contains;
using wf::Device;

TEST_CASE("Device::parse reads cpu, cuda and cuda:N", "[core]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cuda:3").is_cuda());
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(3).str() == "cuda:3");
  CHECK(Device::parse(Device::cuda(12).str()) == Device::cuda(12));
}

TEST_CASE("Device::parse rejects anything else and names it", "[core]") {
  for (const char* bad : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999999999", ""}) {
    CAPTURE(bad);
    REQUIRE_THROWS_AS(Device::parse(bad), wf::Error);
    REQUIRE_THROWS_WITH(Device::parse(bad), Contains(std::string("'") + bad + "'") && Contains("cuda:N"));
  }
}
