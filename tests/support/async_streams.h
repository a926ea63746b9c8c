#pragma once
// For a test's scope, the test device's streams as worker-thread queues with random delays of up
// to max_delay_us before each task (src/core/test_device_streams.h), or inline when `on` is false;
// inline again afterwards.
#include "src/core/test_device_streams.h"

namespace wf::parity {

class AsyncStreams {
 public:
  explicit AsyncStreams(bool on, int max_delay_us = 50) { detail::set_test_device_async(on, max_delay_us); }
  ~AsyncStreams() { detail::set_test_device_async(false); }
  AsyncStreams(const AsyncStreams&) = delete;
  AsyncStreams& operator=(const AsyncStreams&) = delete;
};

}  // namespace wf::parity
