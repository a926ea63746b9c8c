// The routines the CUDA kernels share with the CPU bit for bit (src/core/philox.h,
// kernels/cuda/float_bits.h) and their strided index map (kernels/cuda/strided.h), compiled for
// the host and compared with core's: the same source is what nvcc compiles into the dropout,
// Ulysses, gather and broadcast kernels, so these prove the device's bits where no GPU is.
// Exact comparisons throughout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/cuda/float_bits.h"
#include "src/core/philox.h"
#include "kernels/cuda/strided.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/rng.h"

namespace cuda = wf::kernels::cuda;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Doubles of every kind: normal draws at many scales, values near bf16 and f32 rounding ties,
// subnormals, the extremes, infinities and NaNs of both signs.
std::vector<double> awkward_doubles() {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 1.0 + 0x1.0p-8, 1.0 + 0x1.0p-8 + 0x1.0p-40, 1.0 + 0x1.0p-24,
                           1.0 + 0x1.0p-24 + 0x1.0p-52, 1.0 + 0x1.8p-8, 1.0 - 0x1.0p-9 - 0x1.0p-60,
                           std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(),
                           static_cast<double>(std::numeric_limits<float>::denorm_min()),
                           0.75 * static_cast<double>(std::numeric_limits<float>::denorm_min()),
                           0.25 * static_cast<double>(std::numeric_limits<float>::denorm_min()),
                           static_cast<double>(std::numeric_limits<float>::max()),
                           static_cast<double>(std::numeric_limits<float>::max()) * (1 + 0x1.0p-30),
                           std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::quiet_NaN()};
  std::mt19937_64 gen(20260);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> scale(-140, 140);
  for (int i = 0; i < 20000; ++i) v.push_back(std::ldexp(normal(gen), scale(gen)));
  for (int i = 0; i < 4000; ++i) {  // random bit patterns: every exponent; then NaNs with any payload
    std::uint64_t u = i % 2 ? gen() : (gen() | 0x7ff0000000000000ull);
    if (u << 1 == 0xffe0000000000000ull) u |= 1;  // not an infinity
    double d;
    std::memcpy(&d, &u, sizeof d);
    v.push_back(d);
  }
  return v;
}

}  // namespace

TEST_CASE("philox.h: Philox-4x32-10 gives Random123's known answers", "[kernels][cuda_bit_exact]") {
  // One implementation (src/core/philox.h) serves wf::philox4x32 on the host and the CUDA dropout
  // kernel, so host and device agree by construction; this pins it to the published generator
  // (Random123's kat_vectors: counter words 0..3, key words 0..1, then the four output words).
  struct Known {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Known known[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Known& k : known) {
    const std::uint64_t lo = k.ctr[0] | (std::uint64_t{k.ctr[1]} << 32), hi = k.ctr[2] | (std::uint64_t{k.ctr[3]} << 32);
    const std::uint64_t key = k.key[0] | (std::uint64_t{k.key[1]} << 32);
    const auto got = wf::philox4x32(key, lo, hi);
    for (int w = 0; w < 4; ++w) CHECK(got[static_cast<std::size_t>(w)] == k.out[w]);
  }
}

TEST_CASE("cuda float_bits.h: the float/double, bf16 and round-to-odd conversions are the host's, NaNs included",
          "[kernels][cuda_bit_exact]") {
  for (const double d : awkward_doubles()) {
    INFO("value " << d);
    const float rounded_odd = cuda::double_to_float_round_odd(d);
    const float want_odd = wf::double_to_float_round_odd(d);
    REQUIRE(bits_of(rounded_odd) == bits_of(want_odd));
    REQUIRE(cuda::double_to_bf16_bits(d) == wf::from_double<wf::bf16>(d).bits);

    const float f = static_cast<float>(d);
    REQUIRE(bits_of(cuda::double_to_float(d)) == bits_of(f));
    const double widened = cuda::float_to_double(f), want_widened = static_cast<double>(f);
    REQUIRE(std::memcmp(&widened, &want_widened, sizeof widened) == 0);
    REQUIRE(cuda::float_to_bf16_bits(f) == wf::float_to_bf16(f).bits);
    const std::uint16_t b = cuda::float_to_bf16_bits(f);
    REQUIRE(bits_of(cuda::bf16_bits_to_float(b)) == bits_of(wf::bf16_to_float(wf::bf16{b})));
  }
  // Every bf16 widens as core's does.
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    REQUIRE(bits_of(cuda::bf16_bits_to_float(bits)) == bits_of(wf::bf16_to_float(wf::bf16{bits})));
  }
}

TEST_CASE("cuda strided.h: the merged index map reads what a plain multi-index walk reads",
          "[kernels][cuda_bit_exact]") {
  std::mt19937_64 gen(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const int nd = static_cast<int>(gen() % 8);
    std::vector<std::int64_t> extent(static_cast<std::size_t>(nd));
    std::int64_t n = 1;
    for (auto& e : extent) n *= (e = 1 + static_cast<std::int64_t>(gen() % 4));
    // Operand 0: a permuted contiguous tensor; operand 1: broadcast (stride 0) along random dims.
    std::vector<std::int64_t> order(extent.size());
    for (std::size_t d = 0; d < order.size(); ++d) order[d] = static_cast<std::int64_t>(d);
    if (trial % 2) std::shuffle(order.begin(), order.end(), gen);
    std::vector<std::int64_t> strides[2] = {std::vector<std::int64_t>(extent.size()),
                                            std::vector<std::int64_t>(extent.size())};
    std::int64_t step0 = 1, step1 = 1;
    for (std::size_t j = order.size(); j-- > 0;) {
      const auto d = static_cast<std::size_t>(order[j]);
      strides[0][d] = step0;
      step0 *= extent[d];
    }
    for (std::size_t d = extent.size(); d-- > 0;) {
      const bool broadcast = gen() % 3 == 0;
      strides[1][d] = broadcast ? 0 : step1;
      if (!broadcast) step1 *= extent[d];
    }
    cuda::StridedLayout<2> layout;
    REQUIRE(cuda::merge_strided_dims(extent, strides, layout) <= cuda::kMaxStridedDims);
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t want[2] = {0, 0}, rest = i, got[2];
      for (std::size_t d = extent.size(); d-- > 0;) {
        const std::int64_t index = rest % extent[d];
        rest /= extent[d];
        for (int k = 0; k < 2; ++k) want[k] += index * strides[k][d];
      }
      cuda::strided_offsets(layout, i, got);
      INFO("trial " << trial << " element " << i);
      REQUIRE(got[0] == want[0]);
      REQUIRE(got[1] == want[1]);
    }
  }
}
