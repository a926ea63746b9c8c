// Element types: names, parsing, and the bf16/f16 conversions, checked bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "wallfacer/core/dtype.h"
#include "wallfacer/core/tensor.h"

using Catch::Contains;
using wf::DType;

namespace {

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::u8};

float float_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint16_t bf16_bits(float f) { return wf::float_to_bf16(f).bits; }
std::uint16_t f16_bits(float f) { return wf::float_to_f16(f).bits; }
bool bf16_is_nan(std::uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }
bool f16_is_nan(std::uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }

// Converts every 16-bit pattern to float and back; returns how many came back different
// (NaNs only have to stay NaNs).
template <typename Half, typename ToFloat, typename FromFloat, typename IsNan>
int count_round_trip_failures(ToFloat to_float, FromFloat from_float, IsNan is_nan) {
  int failures = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const Half h{static_cast<std::uint16_t>(bits)};
    const std::uint16_t back = from_float(to_float(h)).bits;
    const bool ok = is_nan(h.bits) ? is_nan(back) : back == h.bits;
    if (!ok && failures++ == 0) UNSCOPED_INFO("first failure: 0x" << std::hex << bits << " came back as 0x" << back);
  }
  return failures;
}

}  // namespace

TEST_CASE("dtype names and sizes parse back to the same dtype", "[core]") {
  for (DType d : kAllDTypes) {
    CAPTURE(wf::dtype_name(d));
    CHECK(wf::parse_dtype(wf::dtype_name(d)) == d);
  }
  CHECK(wf::dtype_size(DType::f32) == 4);
  CHECK(wf::dtype_size(DType::f64) == 8);
  CHECK(wf::dtype_size(DType::bf16) == 2);
  CHECK(wf::dtype_size(DType::f16) == 2);
  CHECK(wf::dtype_size(DType::i32) == 4);
  CHECK(wf::dtype_size(DType::i64) == 8);
  CHECK(wf::dtype_size(DType::u8) == 1);
  CHECK(wf::parse_dtype("float32") == DType::f32);
  CHECK(wf::parse_dtype("bfloat16") == DType::bf16);
  CHECK(wf::parse_dtype("half") == DType::f16);
  REQUIRE_THROWS_AS(wf::parse_dtype("f8"), wf::Error);
  REQUIRE_THROWS_WITH(wf::parse_dtype("f8"), Contains("'f8'") && Contains("bf16"));
}

TEST_CASE("float to bf16 rounds to nearest, ties to even", "[core]") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits(-2.0f) == 0xC000);
  CHECK(bf16_bits(0.0f) == 0x0000);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  // 1 + 2^-8 lies exactly between 0x3F80 and 0x3F81: the tie goes to the even 0x3F80 ...
  CHECK(bf16_bits(float_from_bits(0x3F808000u)) == 0x3F80);
  // ... and the tie between 0x3F81 and 0x3F82 goes up, to the even 0x3F82.
  CHECK(bf16_bits(float_from_bits(0x3F818000u)) == 0x3F82);
  // One float ulp either side of a tie is not a tie.
  CHECK(bf16_bits(float_from_bits(0x3F808001u)) == 0x3F81);
  CHECK(bf16_bits(float_from_bits(0x3F807FFFu)) == 0x3F80);
  // Rounding up carries into the exponent; the largest float rounds to infinity.
  CHECK(bf16_bits(float_from_bits(0x3FFFFFFFu)) == 0x4000);
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // bf16 has float's exponent range, so float subnormals stay subnormal.
  CHECK(bf16_bits(float_from_bits(0x00010000u)) == 0x0001);
  CHECK(wf::bf16_to_float(wf::bf16{0x3F80}) == 1.0f);
  CHECK(wf::bf16_to_float(wf::bf16{0xC049}) == -3.140625f);
}

TEST_CASE("bf16 keeps every NaN a NaN", "[core]") {
  // Plain rounding would turn the signalling NaN into infinity and 0x7FFFFFFF into -0.
  for (std::uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu, 0xFF800001u}) {
    CAPTURE(nan_bits);
    const std::uint16_t b = bf16_bits(float_from_bits(nan_bits));
    CHECK(bf16_is_nan(b));
    CHECK(std::isnan(wf::bf16_to_float(wf::bf16{b})));
  }
}

TEST_CASE("every bf16 value survives a round trip through float", "[core]") {
  const int failures = count_round_trip_failures<wf::bf16>(wf::bf16_to_float, wf::float_to_bf16, bf16_is_nan);
  CHECK(failures == 0);
}

TEST_CASE("float to f16 rounds to nearest even, overflows to inf and keeps subnormals", "[core]") {
  CHECK(f16_bits(1.0f) == 0x3C00);
  CHECK(f16_bits(-2.0f) == 0xC000);
  CHECK(f16_bits(0.5f) == 0x3800);
  CHECK(f16_bits(-0.0f) == 0x8000);
  CHECK(f16_bits(65504.0f) == 0x7BFF);  // largest finite f16
  // Ties to even: 1 + 2^-11 is halfway between 0x3C00 and 0x3C01, 1 + 3 * 2^-11 between 0x3C01 and 0x3C02.
  CHECK(f16_bits(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(f16_bits(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(f16_bits(1.0f + 0x1p-11f + 0x1p-23f) == 0x3C01);
  // Overflow: 65520 is the tie between 65504 and 2^16, and the even side is out of range.
  CHECK(f16_bits(65519.0f) == 0x7BFF);
  CHECK(f16_bits(65520.0f) == 0x7C00);
  CHECK(f16_bits(1e6f) == 0x7C00);
  CHECK(f16_bits(-1e6f) == 0xFC00);
  CHECK(f16_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f16_bits(std::numeric_limits<float>::max()) == 0x7C00);
  // Subnormals are multiples of 2^-24, rounded half to even.
  CHECK(f16_bits(0x1p-24f) == 0x0001);
  CHECK(f16_bits(-0x1p-24f) == 0x8001);
  CHECK(f16_bits(0x1p-25f) == 0x0000);      // tie between 0 and 1 → 0
  CHECK(f16_bits(3 * 0x1p-25f) == 0x0002);  // tie between 1 and 2 → 2
  CHECK(f16_bits(0x1p-26f) == 0x0000);
  CHECK(f16_bits(1023 * 0x1p-24f) == 0x03FF);    // largest subnormal
  CHECK(f16_bits(1023.5f * 0x1p-24f) == 0x0400);  // tie rounds up into the smallest normal
  CHECK(f16_bits(0x1p-14f) == 0x0400);
  CHECK(wf::f16_to_float(wf::f16{0x0001}) == 0x1p-24f);
  CHECK(wf::f16_to_float(wf::f16{0x03FF}) == 1023 * 0x1p-24f);
  CHECK(wf::f16_to_float(wf::f16{0x7BFF}) == 65504.0f);
  CHECK(std::isinf(wf::f16_to_float(wf::f16{0xFC00})));
}

TEST_CASE("f16 keeps every NaN a NaN", "[core]") {
  for (std::uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu}) {
    CAPTURE(nan_bits);
    const std::uint16_t h = f16_bits(float_from_bits(nan_bits));
    CHECK(f16_is_nan(h));
    CHECK(std::isnan(wf::f16_to_float(wf::f16{h})));
  }
}

TEST_CASE("every f16 value, subnormals included, survives a round trip through float", "[core]") {
  const int failures = count_round_trip_failures<wf::f16>(wf::f16_to_float, wf::float_to_f16, f16_is_nan);
  CHECK(failures == 0);
}

TEST_CASE("to(dtype) converts between every pair of dtypes", "[core]") {
  // Values exact in every dtype (u8 holds 0..255, bf16 has 8 significant bits).
  const std::vector<double> values{0, 1, 2, 3, 7, 42, 100, 255};
  const wf::Tensor reference = wf::Tensor::from_vector(values, {2, 4});
  for (DType from : kAllDTypes) {
    const wf::Tensor src = reference.to(from);
    REQUIRE(src.dtype() == from);
    for (DType to : kAllDTypes) {
      CAPTURE(wf::dtype_name(from), wf::dtype_name(to));
      const wf::Tensor dst = src.to(to);
      CHECK(dst.dtype() == to);
      CHECK(dst.shape() == src.shape());
      if (from == to) {
        CHECK(dst.is_same(src));  // no copy when the dtype already matches
      } else {
        CHECK_FALSE(dst.shares_storage_with(src));
      }
      for (std::int64_t i = 0; i < dst.numel(); ++i) CHECK(dst.at(i) == values[static_cast<std::size_t>(i)]);
    }
  }
}

TEST_CASE("to(dtype) rounds like the scalar conversions and truncates toward zero for integers", "[core]") {
  const wf::Tensor x = wf::Tensor::randn_at({257}, 11, 0);
  const wf::Tensor as_bf16 = x.to(DType::bf16), as_f16 = x.to(DType::f16);
  const float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    CHECK(as_bf16.data<wf::bf16>()[i].bits == bf16_bits(p[i]));
    CHECK(as_f16.data<wf::f16>()[i].bits == f16_bits(p[i]));
  }
  const wf::Tensor fractions = wf::Tensor::from_vector<float>({2.75f, -2.75f, 0.5f}, {3});
  CHECK(fractions.to(DType::i32).to_vector<std::int32_t>() == std::vector<std::int32_t>{2, -2, 0});
  CHECK(fractions.to(DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, -2, 0});
}

// Regression: narrowing f64 through a round-to-nearest f32 can land exactly on a bf16/f16 tie
// and then round the wrong way; the conversion now goes through round-to-odd.
TEST_CASE("f64 to bf16 and f16 rounds once, not twice through f32", "[core]") {
  const wf::Tensor x = wf::Tensor::from_vector<double>({1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-11 + 0x1p-40}, {2});
  CHECK(x.to(DType::bf16).data<wf::bf16>()[0].bits == 0x3F81);
  CHECK(x.to(DType::f16).data<wf::f16>()[1].bits == 0x3C01);
}
