// The CUDA backend's element conversions (src/core/cuda/element_convert.h), compiled here for the
// CPU: every dtype pair gives host_convert's bytes, on every 16-bit pattern, random bits of every
// dtype (NaNs of every payload among them) and values at the roundings' edges. The GPU runs the
// same functions, so this checks its arithmetic without one (tests/cuda checks it on one).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "src/core/cuda/element_convert.h"
#include "src/core/host_copy.h"
#include "wallfacer/core/dtype.h"

using wf::DType;

namespace {

// The element type the CUDA conversions use for a host type (the same bits).
template <class T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<wf::bf16> {
  using type = wf::detail::element::Bf16;
};
template <>
struct DeviceType<wf::f16> {
  using type = wf::detail::element::F16;
};

// Values each conversion has to get right, as S: ties of bf16 and f16 (and a value just above a
// tie that only a round-to-odd float keeps above it), f16's overflow tie and subnormals, f32 and
// f64 subnormals, signed zeros, infinities, NaN, integers at and beyond every limit.
template <class S>
std::vector<S> inputs_of(std::uint64_t seed) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edges = {0.0, -0.0, 1.0, -1.5, 0.1, 2.5, 3.5, -0.5, 0.49999999999999994, 255.5, 256.0,
                                     -129.0, 1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8),
                                     1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                                     1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -11),
                                     1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                     -1.0 - std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                     std::ldexp(1.0, -25) + std::ldexp(1.0, -60),
                                     std::ldexp(1.0, -25) - std::ldexp(1.0, -60),
                                     2049.0, 65504.0, 65519.99, 65520.0, 70000.0, std::ldexp(1.0, -25),
                                     3 * std::ldexp(1.0, -25), 6e-8, -1e-40, 1e-310, 3.4028235677973366e38, -1e300,
                                     16777217.0, 2147483647.5, -2147483649.0, 9007199254740993.0,
                                     9223372036854775807.0, -9223372036854775808.0, inf, -inf,
                                     std::numeric_limits<double>::quiet_NaN(),
                                     -std::numeric_limits<double>::quiet_NaN()};
  std::vector<S> values;
  for (const double v : edges) values.push_back(wf::from_double<S>(v));
  if constexpr (std::is_same_v<S, std::int64_t>) {
    for (const std::int64_t v : {std::numeric_limits<std::int64_t>::max(), (std::int64_t{1} << 53) + 1,
                                 (std::int64_t{1} << 62) + 1, -(std::int64_t{1} << 62) - 3})
      values.push_back(v);
  }
  if constexpr (sizeof(S) == 2) {  // every pattern
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      const auto b = static_cast<std::uint16_t>(bits);
      S v;
      std::memcpy(static_cast<void*>(&v), &b, sizeof v);
      values.push_back(v);
    }
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t bits = rng();
    S v;
    std::memcpy(static_cast<void*>(&v), &bits, sizeof v);
    values.push_back(v);
  }
  return values;
}

}  // namespace

TEST_CASE("the CUDA conversions give the CPU's bytes for every dtype pair", "[core][cuda_rules]") {
  for (const DType from : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    wf::dispatch_all(from, [&](auto source_tag) {
      using S = decltype(source_tag);
      const std::vector<S> in = inputs_of<S>(static_cast<std::uint64_t>(from) + 1);
      for (const DType to : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
        wf::dispatch_all(to, [&](auto target_tag) {
          using D = decltype(target_tag);
          std::vector<D> want(in.size());
          wf::detail::host_convert(in.data(), from, want.data(), to, static_cast<std::int64_t>(in.size()));
          std::size_t mismatches = 0, first = 0;
          for (std::size_t i = 0; i < in.size(); ++i) {
            typename DeviceType<S>::type x;
            std::memcpy(&x, &in[i], sizeof x);
            const auto got =
                wf::detail::element::convert_one<typename DeviceType<S>::type, typename DeviceType<D>::type>(x);
            if (std::memcmp(&got, &want[i], sizeof(D)) != 0 && mismatches++ == 0) first = i;
          }
          INFO(wf::dtype_name(from) << " -> " << wf::dtype_name(to) << ": " << mismatches << " of " << in.size()
                                    << " differ, the first from " << wf::to_double(in[first]));
          CHECK(mismatches == 0);
        });
      }
    });
  }
}
