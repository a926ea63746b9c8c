#pragma once
// Helpers for the distributed tests. Every rank runs the same test cases in the same order, so
// every collective is reached by every rank; failures use CHECK (not REQUIRE) wherever a
// REQUIRE would make one rank leave a test case that the others continue into a collective.
//
// Each rank's input is a deterministic function of (seed, rank): any rank computes what every
// other rank contributed and so the exact expected result, locally.
#include <catch2/catch.hpp>

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/tensor.h"

namespace wf::test {

inline comm::Runtime& runtime() { return comm::Runtime::get(); }

// Turns the communication argument checks on for one scope, whatever WF_COMM_CHECK says.
class ArgumentChecksOn {
 public:
  ArgumentChecksOn() : saved_(comm::argument_checks_enabled()) { comm::set_argument_checks(true); }
  ~ArgumentChecksOn() { comm::set_argument_checks(saved_); }
  ArgumentChecksOn(const ArgumentChecksOn&) = delete;
  ArgumentChecksOn& operator=(const ArgumentChecksOn&) = delete;

 private:
  bool saved_;
};

// A new group of the whole world with its own communicator, call sequence and zeroed counters.
std::shared_ptr<comm::Group> world_group(const std::string& name);

// The dtypes every primitive supports.
inline constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};

// Rank `rank`'s input for one call: normal draws (integers: scaled by 1000 and rounded).
Tensor input_of(int rank, const Shape& shape, DType dtype, std::uint64_t seed);

// Every rank's input of `shape`, concatenated in rank order (what all_gather gives).
Tensor concat_inputs(int ranks, const Shape& shape, DType dtype, std::uint64_t seed);

// Empty when `actual` has the shape and dtype of `expected` and every element is within
// tolerance·(1 + |expected|); otherwise a description of the first difference.
std::string mismatch(const Tensor& actual, const Tensor& expected, double tolerance = 0.0);

// Accumulation tolerance of a reduction in `dtype`: the final rounding of bf16 / f16, a few
// ulps of f32 / f64 for a different summation order, zero for integers.
double reduction_tolerance(DType dtype);

// Σ_r |input_of(r, shape, dtype, seed)| over `ranks` ranks, in f64: what bounds every partial
// sum of a reduction of those inputs.
Tensor abs_sum_of_inputs(int ranks, const Shape& shape, DType dtype, std::uint64_t seed);

// Empty when `actual`, a sum over `ranks` ranks, is within what the reduction may round from
// `expected`: each of its ranks − 1 combines, and a final conversion, rounds by at most the
// dtype's unit roundoff (bf16 2^-8, which reduces in bf16 with f32 combines; f16 2^-11; f32
// 2^-24; f64 2^-53) of a partial sum, itself at most `abs_sum` (abs_sum_of_inputs). Comparing
// two rounded results, pass `results` = 2. Integers compare exactly.
std::string sum_mismatch(const Tensor& actual, const Tensor& expected, const Tensor& abs_sum, int ranks,
                         int results = 1);

// Whether `device_result` (any device) has the dtype, shape and bytes of `cpu_result`.
bool same_bytes(const Tensor& device_result, const Tensor& cpu_result);

// The test device's streams as worker-thread queues, each task delayed up to max_delay_us at
// random, for one scope (src/core/test_device_streams.h): a missing wait between two streams
// then gives wrong values instead of passing by luck.
class AsyncTestDevice {
 public:
  explicit AsyncTestDevice(int max_delay_us);
  ~AsyncTestDevice();
  AsyncTestDevice(const AsyncTestDevice&) = delete;
  AsyncTestDevice& operator=(const AsyncTestDevice&) = delete;
};

// The counters of one call: a message per direction that moved any bytes.
comm::Traffic one_call(std::int64_t bytes_sent, std::int64_t bytes_received);

// Checks the listed primitives' counters since the last reset, and that nothing else was
// counted; then resets the counters for the next check.
void expect_traffic(comm::Group& group, std::initializer_list<std::pair<comm::Primitive, comm::Traffic>> expected);
inline void expect_traffic(comm::Group& group, comm::Primitive primitive, std::int64_t bytes_sent,
                           std::int64_t bytes_received) {
  expect_traffic(group, {{primitive, one_call(bytes_sent, bytes_received)}});
}

// Runs `body` and returns the wf::Error message it threw ("" when it threw nothing).
template <typename F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace wf::test
