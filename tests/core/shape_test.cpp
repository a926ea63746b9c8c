// Shape arithmetic refuses overflow with an error naming the shape, instead of wrapping into a
// small (or negative) element count that would allocate too little and be written past.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/core/shape.h"
#include "wallfacer/core/tensor.h"

using Catch::Matchers::Contains;
using wf::Shape;

namespace {

constexpr std::int64_t kBig = std::int64_t{1} << 32;

// The message of the wf::Error `body` throws.
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const wf::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("shape_numel multiplies extents and refuses overflow, naming the shape", "[core][shape]") {
  CHECK(wf::shape_numel({}) == 1);
  CHECK(wf::shape_numel({2, 3, 4}) == 24);
  CHECK(wf::shape_numel({kBig, kBig / 2 - 1}) == kBig * (kBig / 2 - 1));
  CHECK(wf::shape_numel({std::numeric_limits<std::int64_t>::max()}) == std::numeric_limits<std::int64_t>::max());

  const std::string message = error_of([] { wf::shape_numel({kBig, kBig}); });
  CHECK_THAT(message, Contains("shape [4294967296, 4294967296] has too many elements") && Contains("2^63 - 1"));
  // The wrapped product (0 here) appears nowhere: only the shape and the limit are printed.
  CHECK_THAT(message, !Contains(" 0 ") && !Contains("= 0"));
  CHECK_THAT(error_of([] { wf::shape_numel({-1, 3}); }), Contains("negative extent in shape [-1, 3]"));
  CHECK(wf::checked_numel({kBig, kBig}) == std::nullopt);
  CHECK(wf::checked_numel({-2}) == std::nullopt);
  CHECK(wf::checked_numel({5, 6}) == 30);
}

TEST_CASE("a zero extent does not excuse an overflowing shape", "[core][shape]") {
  // The ops take outer/inner products of a shape's extents; a zero at the end must not let
  // [2^32, 2^32, 0] through as "0 elements" while its first two extents overflow.
  CHECK(wf::shape_numel({0, 5}) == 0);
  CHECK_THAT(error_of([] { wf::shape_numel({kBig, kBig, 0}); }), Contains("has too many elements"));
}

TEST_CASE("shape_nbytes refuses byte counts past 2^63 - 1", "[core][shape]") {
  CHECK(wf::shape_nbytes({2, 3}, 4) == 24);
  CHECK(wf::shape_nbytes({0}, 8) == 0);
  const std::int64_t quarter = std::numeric_limits<std::int64_t>::max() / 4 + 1;
  CHECK_THAT(error_of([&] { wf::shape_nbytes({quarter}, 4); }),
             Contains("a tensor of shape [" + std::to_string(quarter) + "] with 4-byte elements would need more than"));
}

TEST_CASE("tensors of overflowing shapes are refused before anything is allocated", "[core][shape]") {
  CHECK_THAT(error_of([] { wf::Tensor::empty({kBig, kBig}, wf::DType::f32); }), Contains("has too many elements"));
  CHECK_THAT(error_of([] { wf::Tensor::empty({kBig, kBig / 4}, wf::DType::f64); }),
             Contains("with 8-byte elements would need more than"));
  const wf::Tensor t = wf::Tensor::zeros({4}, wf::DType::f32);
  CHECK_THAT(error_of([&] { (void)t.view({kBig, kBig, -1}); }), Contains("view [4294967296, 4294967296, -1]"));
}
