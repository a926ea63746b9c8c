#pragma once
// The test device's streams and events. Inline by default, like the CPU's. In asynchronous mode
// (set_test_device_async) each stream is a queue run in order by a worker thread of its own, each
// task after a random delay: work on two streams then really runs in either order, so a missing
// event wait between them gives a wrong answer instead of passing by luck. Forked children must
// not use asynchronous mode (the workers are not forked with them).
#include <functional>
#include <memory>

#include "wallfacer/core/stream.h"

namespace wf::detail {

// The environment variable WF_TESTDEV_ASYNC=<max delay, microseconds> starts a process in
// asynchronous mode. Turns asynchronous mode on or off (after draining every queue); tasks wait up to
// max_delay_us microseconds before they run.
void set_test_device_async(bool on, int max_delay_us = 200);
bool test_device_async();

// Runs task in stream order: at once in inline mode, else on the stream's worker.
void test_stream_run(const Stream& stream, std::function<void()> task);
void test_stream_synchronize(const Stream& stream);
bool test_stream_idle(const Stream& stream);
void test_streams_synchronize_all();
// A test's hook: the stream's worker sleeps `ms` milliseconds before the stream's next task.
void test_stream_stall(const Stream& stream, int ms);
// Runs `stream` on its worker even while the device is inline (without random delays then): the
// test device's stand-in for NCCL marks its streams so, since its operations wait for peers, which
// run inline would block the host as NCCL's never do (a receive posted ahead would wait there).
void test_stream_make_asynchronous(const Stream& stream);
// A test's hook: every later task of the stream waits `us` microseconds more before it runs (0
// ends it), so work on another stream that should wait for this one's runs first when it does
// not: a missing wait then fails deterministically rather than by chance.
void test_stream_slow_down(const Stream& stream, int us);

// Graphs (wallfacer/core/graph.h): from begin to end, the tasks queued on `stream` are recorded
// instead of run; a task queued meanwhile from the capturing thread on another of the device's
// streams (but its default stream, where frees are ordered) throws GraphCaptureError. A replay
// queues the recorded tasks again, in order, each a task of its own (delays between them in
// asynchronous mode).
void test_stream_begin_capture(const Stream& stream);
std::shared_ptr<void> test_stream_end_capture(const Stream& stream);
void test_stream_abort_capture(const Stream& stream) noexcept;
void test_stream_replay(const std::shared_ptr<void>& graph, const Stream& stream);

std::shared_ptr<void> test_event_create();
void test_event_record(const std::shared_ptr<void>& event, const Stream& stream);
void test_stream_wait_event(const Stream& stream, const std::shared_ptr<void>& event);
void test_event_synchronize(void* event);
bool test_event_query(void* event);

}  // namespace wf::detail
