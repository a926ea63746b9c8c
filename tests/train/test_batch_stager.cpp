// BatchStager (train/batch_stager.h) on the test device, with its streams as queues that run with
// random delays: every staged batch holds the source's values, whether it came from a prefetch or
// was copied when asked for; only the events between the compute and copy streams keep it so.
#include <catch2/catch.hpp>

#include "support/async_streams.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/config/run_config.h"
#include "wallfacer/core/cuda_info.h"
#include "wallfacer/train/batch_stager.h"
#include "wallfacer/train/device_placement.h"

namespace {

using wf::Device;
using wf::DType;
using wf::Tensor;

// Batch (step, micro): "tokens" [2, 5] i64 and "x" [3] f32 with values that name the pair, and
// documents (packed rows) that name it too.
class CountingSource final : public wf::models::BatchSource {
 public:
  wf::models::Batch get(std::int64_t step, std::int64_t micro) const override {
    ++calls;
    Tensor tokens = Tensor::empty({2, 5}, DType::i64);
    Tensor x = Tensor::empty({3}, DType::f32);
    for (std::int64_t i = 0; i < tokens.numel(); ++i) tokens.set(i, double(step * 1000 + micro * 100 + i));
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, double(step) + 0.25 * double(micro) + 0.001 * double(i));
    wf::models::Batch b;
    b.set("tokens", tokens);
    b.set("x", x);
    return b.set_documents({{0, step + 1, 5}, {0, micro + 1, 5}});
  }
  std::string describe() const override { return "counting source"; }
  mutable int calls = 0;
};

void require_batch(const wf::models::Batch& got, const CountingSource& source, std::int64_t step, std::int64_t micro) {
  const wf::models::Batch want = source.get(step, micro);
  for (const std::string& name : want.names()) {
    const Tensor g = got.at(name).to(Device::cpu());
    const Tensor& w = want.at(name);
    REQUIRE(g.shape() == w.shape());
    for (std::int64_t i = 0; i < w.numel(); ++i) REQUIRE(g.at(i) == w.at(i));
  }
  REQUIRE(got.documents() == want.documents());  // host data, beside the copied tensors
}

}  // namespace

TEST_CASE("BatchStager: staged batches hold the source's values, prefetched or not", "[train][batch_stager]") {
  const bool async = GENERATE(false, true);
  CAPTURE(async);
  const wf::parity::AsyncStreams streams(async, 100);
  CountingSource source;
  wf::train::BatchStager stager(Device::test(), /*microbatches=*/2);
  for (std::int64_t step = 0; step < 3; ++step) {
    for (std::int64_t micro = 0; micro < 2; ++micro) {
      const wf::models::Batch b = stager.get(source, step, micro);
      REQUIRE(b.at("tokens").device() == Device::test());
      require_batch(b, source, step, micro);
    }
  }
  // The first batch was copied when asked for; every later one had been prefetched.
  CHECK(stager.direct_copies() == 1);
  CHECK(stager.prefetch_hits() == 5);
  // Out of order (a pipeline schedule, an evaluation): copied when asked for, still right.
  require_batch(stager.get(source, 7, 1, /*prefetch_next=*/false), source, 7, 1);
  CHECK(stager.direct_copies() == 2);
}

TEST_CASE("BatchStager: on the CPU the source's tensors are used as they are", "[train][batch_stager]") {
  CountingSource source;
  wf::train::BatchStager stager(Device::cpu(), 1);
  const wf::models::Batch b = stager.get(source, 4, 0);
  CHECK(b.at("x").device() == Device::cpu());
  CHECK(source.calls == 1);  // no prefetch on the CPU
  require_batch(b, source, 4, 0);
}

TEST_CASE("resolve_train_device: auto is the CPU without a GPU, cuda then an error naming the fix", "[train][device]") {
  if (!wf::cuda_devices().empty()) {
    CHECK(wf::train::resolve_train_device(wf::config::kAutoDevice).is_cuda());
    return;
  }
  CHECK(wf::train::resolve_train_device(wf::config::kAutoDevice) == Device::cpu());
  CHECK(wf::train::resolve_train_device(Device::test()) == Device::test());
  CHECK_THROWS_WITH(wf::train::resolve_train_device(Device::cuda()),
                    Catch::Contains("no CUDA GPU is visible") && Catch::Contains("set train.device: cpu"));
}
