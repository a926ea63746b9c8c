#pragma once
// Errors found by a kernel in the data it reads (a target outside [0, vocab), an id outside the
// embedding): the CPU throws at once; a kernel cannot throw and the host must not read device
// memory mid-step to ask. So the kernel records the first such error in a per-device record in
// mapped host memory, and the CUDA backend raises it as a wf::Error at the host's next
// synchronisation with that device (Stream::synchronize, a copy to the host, Event::synchronize):
// at the latest the next logged step, with the message the CPU would have given.
//
// Free of fmt: .cu files include it.
#include <cstdint>

namespace wf::detail {

struct DeviceErrorRecord {
  unsigned int raised;  // 0 until a kernel claims the record; the first one wins
  unsigned int ready;   // 1 once the claimant's message, row and value are written
  int message;          // register_device_error_message's id
  long long row;        // the message's two numbers: where, and the offending value
  long long value;
};

#ifdef __CUDACC__
// Records (message, row, value) unless an earlier error is recorded. Any thread, any kernel.
__device__ inline void report_device_error(DeviceErrorRecord* record, int message, long long row, long long value) {
  if (atomicCAS(&record->raised, 0u, 1u) == 0u) {
    record->message = message;
    record->row = row;
    record->value = value;
    // Published only after the fields: a host check made while this kernel still runs (after a
    // synchronisation with another stream) sees either nothing or the whole record.
    __threadfence_system();
    *static_cast<volatile unsigned int*>(&record->ready) = 1u;
  }
}
#endif

// Host side (src/core/cuda/device_error.cpp).
// The record kernels of `device_index` write to (a device pointer to mapped pinned memory).
DeviceErrorRecord* device_error_record(int device_index);
// An id for a message with two {} placeholders, filled with row and value ("cross_entropy: target
// {1} at row {0} is outside [0, vocab)"). The same text always gets the same id, so a message
// formatted per call from host values (vocab, `what`) costs a lookup, not a new entry.
int register_device_error_message(const char* format);
// Throws wf::Error with the recorded message when a kernel of `device_index` recorded one, and
// clears the record. The CUDA backend calls it after each host synchronisation.
void raise_device_error(int device_index);

}  // namespace wf::detail
