#pragma once
// What the rest of core and the backends ask of a graph capture in progress on this thread
// (wallfacer/core/graph.h has the rules; graph.cpp keeps the state).
#include <cstddef>
#include <optional>

#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/stream.h"

namespace wf::detail {

// Whether this thread is capturing a graph on `device`.
bool capturing(Device device);
// A block from the capture's pool when this thread is capturing on `device`; nullopt otherwise
// (the caller allocates as usual).
std::optional<MemoryBlock> capture_allocate(Device device, std::size_t nbytes);
// True when `block` is the graph's to release: a block of a graph's pool, which returns to it
// now, or a block of `device` freed while this thread captures on it, which the capture's graph
// may read at its replays and so keeps until it is gone. False for any other block (the caller
// releases it as usual). Cheap while no graph pool has a block in use and nothing is captured.
bool capture_release(Device device, MemoryBlock block);
// A copy of nbytes of host memory that lives as long as the capture's graph, in the device's
// pinned memory: a copy to the device recorded from it reads the same bytes at every replay.
const void* capture_keep_host_bytes(Device device, const void* host_src, std::size_t nbytes);
// Throws GraphCaptureError naming `what` when this thread is capturing (on any device): the
// host waits for the device (`what` says how), which a graph cannot record.
void refuse_host_wait_in_capture(const char* what);
// Throws GraphCaptureError when `stream` is the one this thread is capturing: events on the
// capture stream (ordering it against other streams) are not recorded.
void refuse_event_in_capture(const Stream& stream, const char* what);

}  // namespace wf::detail
