#include "dist_testing.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "src/core/test_device_streams.h"

namespace wf::test {

std::shared_ptr<comm::Group> world_group(const std::string& name) {
  std::shared_ptr<comm::Group> group = runtime().split(name, 0, runtime().rank());
  group->traffic().reset();
  return group;
}

Tensor input_of(int rank, const Shape& shape, DType dtype, std::uint64_t seed) {
  constexpr std::uint64_t kRankStride = 1'000'003;  // far apart streams: ranks never share draws
  Tensor values = Tensor::randn_at(shape, seed, static_cast<std::uint64_t>(rank) * kRankStride, DType::f64);
  if (!is_floating(dtype)) {
    double* p = values.data<double>();
    for (std::int64_t i = 0; i < values.numel(); ++i) p[i] = std::round(p[i] * 1000.0);
  }
  return values.to(dtype);
}

Tensor concat_inputs(int ranks, const Shape& shape, DType dtype, std::uint64_t seed) {
  Shape all = shape;
  all[0] *= ranks;
  Tensor out = Tensor::empty(all, dtype);
  for (int r = 0; r < ranks; ++r) out.slice0(r * shape[0], (r + 1) * shape[0]).copy_(input_of(r, shape, dtype, seed));
  return out;
}

std::string mismatch(const Tensor& actual, const Tensor& expected, double tolerance) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return fmt::format("got {} {}, expected {} {}", dtype_name(actual.dtype()), shape_str(actual.shape()),
                       dtype_name(expected.dtype()), shape_str(expected.shape()));
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - e[i]) <= tolerance * (1.0 + std::abs(e[i])))) {
      return fmt::format("element {} of {}: got {}, expected {} (tolerance {})", i, shape_str(expected.shape()), a[i],
                         e[i], tolerance);
    }
  }
  return {};
}

double reduction_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 1.0 / 256;   // one rounding to 8 significant bits
    case DType::f16: return 1.0 / 2048;   // one rounding to 11 significant bits
    case DType::f32: return 1e-6;
    case DType::f64: return 1e-14;
    default: return 0.0;
  }
}

Tensor abs_sum_of_inputs(int ranks, const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor acc = Tensor::zeros(shape, DType::f64);
  double* a = acc.data<double>();
  for (int r = 0; r < ranks; ++r) {
    const std::vector<double> x = input_of(r, shape, dtype, seed).to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i) a[i] += std::abs(x[i]);
  }
  return acc;
}

std::string sum_mismatch(const Tensor& actual, const Tensor& expected, const Tensor& abs_sum, int ranks, int results) {
  const int roundoff_bits = actual.dtype() == DType::bf16  ? 8
                            : actual.dtype() == DType::f16 ? 11
                            : actual.dtype() == DType::f32 ? 24
                            : actual.dtype() == DType::f64 ? 53
                                                           : 0;
  if (roundoff_bits == 0) return mismatch(actual.to(DType::f64), expected.to(DType::f64));
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>(),
                            bound = abs_sum.to_vector<double>();
  if (a.size() != e.size() || a.size() != bound.size()) {
    return fmt::format("{} elements, expected {} (bounds for {})", a.size(), e.size(), bound.size());
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double tolerance = results * ranks * std::ldexp(bound[i], -roundoff_bits);
    if (!(std::abs(a[i] - e[i]) <= tolerance)) {
      return fmt::format("element {}: got {}, expected {} (a {} sum over {} ranks: tolerance {})", i, a[i], e[i],
                         dtype_name(actual.dtype()), ranks, tolerance);
    }
  }
  return {};
}

comm::Traffic one_call(std::int64_t bytes_sent, std::int64_t bytes_received) {
  return {bytes_sent > 0 ? 1 : 0, bytes_sent, bytes_received > 0 ? 1 : 0, bytes_received};
}

void expect_traffic(comm::Group& group, std::initializer_list<std::pair<comm::Primitive, comm::Traffic>> expected) {
  comm::Traffic sum;
  for (const auto& [primitive, traffic] : expected) {
    INFO("group '" << group.name() << "' of " << group.size() << ", rank " << group.rank() << ", primitive "
                   << comm::primitive_name(primitive));
    const comm::Traffic got = group.traffic().get(primitive);
    CHECK(got.messages_sent == traffic.messages_sent);
    CHECK(got.bytes_sent == traffic.bytes_sent);
    CHECK(got.messages_received == traffic.messages_received);
    CHECK(got.bytes_received == traffic.bytes_received);
    sum += traffic;
  }
  CHECK(group.traffic().total() == sum);  // nothing else was counted
  group.traffic().reset();
}

bool same_bytes(const Tensor& device_result, const Tensor& cpu_result) {
  const Tensor got = device_result.to(Device::cpu());
  return got.shape() == cpu_result.shape() && got.dtype() == cpu_result.dtype() &&
         (got.nbytes() == 0 || std::memcmp(got.raw_data(), cpu_result.raw_data(), got.nbytes()) == 0);
}

AsyncTestDevice::AsyncTestDevice(int max_delay_us) { detail::set_test_device_async(true, max_delay_us); }
AsyncTestDevice::~AsyncTestDevice() { detail::set_test_device_async(false); }

}  // namespace wf::test
