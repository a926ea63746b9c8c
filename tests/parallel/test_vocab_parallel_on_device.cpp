// The vocabulary-parallel cross-entropy and embedding entry points of the test device's backend
// (kernels/backend.h) against the CPU's, bit for bit, for every rank of a simulated tp group of 3
// (the all-reduces done here, on the host copies). The pieces' arithmetic is tested against the
// single-device reference in tests/kernels/test_vocab_parallel.cpp; this checks that the device's
// entries take their scalars (count, upstream gradient) from device memory and write the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"

using wf::Device;
using wf::DType;
using wf::Tensor;

namespace {

constexpr std::int64_t kIgnore = -100;

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// What every rank's entries wrote, on one device (dx: the ranks' gradients stacked).
struct Pieces {
  Tensor count, max, sums, lse, loss, dx;
};

}  // namespace

TEST_CASE("vocab-parallel entries on the test device match the CPU's bit for bit", "[parallel][vocab][testdev]") {
  const std::int64_t rows = 5, vocab = 10, parts = 3, k = 4;  // padded to 12: the last rank holds 2 real columns
  const Tensor logits = Tensor::randn_at({parts, rows, k}, 7, 0, DType::f32);
  const Tensor targets = Tensor::from_vector(std::vector<std::int64_t>{3, kIgnore, 9, 0, 6}, {rows});
  for (const bool mean : {true, false}) {
    CAPTURE(mean);
    std::vector<Pieces> by_device;
    for (const Device device : {Device::cpu(), Device::test()}) {
      wf::kernels::Backend& b = wf::kernels::backend_for(device);
      const wf::Stream s = wf::Stream::current(device);
      const Tensor x = logits.to(device), t = targets.to(device);
      Pieces p{Tensor::empty({}, DType::i64, device), Tensor(), Tensor(), Tensor::empty({rows}, DType::f64, device),
               Tensor::empty({}, DType::f64, device), Tensor::empty({parts, rows, k}, DType::f32, device)};
      b.count_targets(s, "test", rows, vocab, t.data<std::int64_t>(), kIgnore, p.count.data<std::int64_t>());
      const auto own = [&](std::int64_t r) { return std::clamp(vocab - r * k, std::int64_t{0}, k); };
      // The max all-reduce, on host copies.
      std::vector<double> max(rows, -1e300);
      for (std::int64_t r = 0; r < parts; ++r) {
        Tensor m = Tensor::empty({rows}, DType::f64, device);
        b.vocab_parallel_row_max(s, DType::f32, rows, k, own(r), x.slice0(r, r + 1).data<float>(), m.data<double>());
        const std::vector<double> got = m.to(Device::cpu()).to_vector<double>();
        for (std::int64_t i = 0; i < rows; ++i) max[i] = std::max(max[i], got[i]);
      }
      p.max = Tensor::from_vector(max, {rows}).to(device);
      std::vector<double> sums(2 * rows, 0.0);
      for (std::int64_t r = 0; r < parts; ++r) {
        Tensor part = Tensor::empty({2 * rows}, DType::f64, device);
        b.vocab_parallel_partials(s, DType::f32, rows, k, own(r), r * k, x.slice0(r, r + 1).data<float>(),
                                  p.max.data<double>(), t.data<std::int64_t>(), kIgnore, part.data<double>());
        const std::vector<double> got = part.to(Device::cpu()).to_vector<double>();
        for (std::int64_t i = 0; i < 2 * rows; ++i) sums[i] += got[i];
      }
      p.sums = Tensor::from_vector(sums, {2 * rows}).to(device);
      b.vocab_parallel_loss(s, rows, p.max.data<double>(), p.sums.data<double>(), t.data<std::int64_t>(), kIgnore,
                            mean ? p.count.data<std::int64_t>() : nullptr, p.lse.data<double>(), p.loss.data<double>());
      const Tensor grad = Tensor::full({}, 0.5, DType::f32, device);
      for (std::int64_t r = 0; r < parts; ++r) {
        Tensor d = p.dx.slice0(r, r + 1);
        b.vocab_parallel_backward(s, DType::f32, rows, k, own(r), r * k, x.slice0(r, r + 1).data<float>(),
                                  t.data<std::int64_t>(), kIgnore, p.lse.data<double>(), grad.data<float>(),
                                  mean ? p.count.data<std::int64_t>() : nullptr, d.data<float>());
      }
      by_device.push_back(p);
    }
    const Pieces &cpu = by_device[0], &dev = by_device[1];
    CHECK(dev.count.device() == Device::test());
    CHECK(cpu.count.item() == 4);
    CHECK(same_bits(dev.count, cpu.count));
    CHECK(same_bits(dev.lse, cpu.lse));
    CHECK(same_bits(dev.loss, cpu.loss));
    CHECK(same_bits(dev.dx, cpu.dx));
  }
}

TEST_CASE("the vocab-parallel embedding's id map on the test device matches the CPU's", "[parallel][vocab][testdev]") {
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{0, 4, 5, 9, 3, 7}, {6});
  std::vector<std::pair<Tensor, Tensor>> out;
  for (const Device device : {Device::cpu(), Device::test()}) {
    Tensor local = Tensor::empty({6}, DType::i64, device), mask = Tensor::empty({6}, DType::f64, device);
    wf::kernels::backend_for(device).vocab_parallel_local_ids(wf::Stream::current(device), "test", 6, 10, 4, 3,
                                                              ids.to(device).data<std::int64_t>(),
                                                              local.data<std::int64_t>(), mask.data<double>());
    out.emplace_back(local, mask);
  }
  CHECK(same_bits(out[1].first, out[0].first));
  CHECK(same_bits(out[1].second, out[0].second));
  CHECK(out[0].second.to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 0});
}

TEST_CASE("the replica check's spreads on the test device match the CPU's", "[parallel][testdev]") {
  const Tensor own = Tensor::randn_at({5}, 3, 0, DType::f64), extremes = Tensor::randn_at({10}, 3, 10, DType::f64);
  std::vector<Tensor> out;
  for (const Device device : {Device::cpu(), Device::test()}) {
    Tensor found = Tensor::empty({4}, DType::f64, device);
    wf::kernels::backend_for(device).replica_spread(wf::Stream::current(device), 5, {2, 5},
                                                    extremes.to(device).data<double>(), own.to(device).data<double>(),
                                                    found.data<double>());
    out.push_back(found);
  }
  CHECK(same_bits(out[1], out[0]));
}
