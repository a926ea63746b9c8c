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

// Median wall time of `iters` runs of fn after one warm-up run, in seconds.
inline double median_seconds(int iters, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(std::move(times));
}

}  // namespace wf
