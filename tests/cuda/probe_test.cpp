// The suite's first case: the GPU it runs on is there and its memory round-trips.
#include "tests/cuda/cuda_test_util.h"

TEST_CASE("cuda: a tensor copied to the GPU and back is unchanged", "[cuda]") {
  const wf::Tensor x = wf::cuda_test::random_normal({3, 5}, wf::cuda_test::fresh_seed(1));
  wf::cuda_test::require_equal(x.to(wf::cuda_test::gpu()).to(wf::Device::cpu()), x, "round trip");
}
