#pragma once
// Timing statistics shared by the `wallfacer bench` commands and the measured peak (train/peak_flops.h).
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace wf {

// The middle value (upper middle for an even count); `values` must not be empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Wall time of one run of fn, in seconds.
inline double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Median wall time of `iters` runs of fn after one warm-up run, in seconds.
inline double median_seconds(int iters, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) times.push_back(seconds_of(fn));
  return median(std::move(times));
}

// Median wall times of `iters` runs each of a and b, in seconds, after one warm-up run of each
// (first-touch pages, the allocator). The two run alternately, run for run, so drift on a shared
// machine hits both alike: for fused-versus-composition comparisons.
struct MedianPair {
  double a = 0, b = 0;
};
inline MedianPair median_seconds_alternating(int iters, const std::function<void()>& a,
                                             const std::function<void()>& b) {
  a();
  b();
  std::vector<double> times_a, times_b;
  for (int i = 0; i < iters; ++i) {
    times_a.push_back(seconds_of(a));
    times_b.push_back(seconds_of(b));
  }
  return {median(std::move(times_a)), median(std::move(times_b))};
}

}  // namespace wf
