#pragma once
// Errors the CUDA kernels find in the data they read (a target outside [0, vocab), an id outside
// the embedding, a ddpm time that is no step): the kernel records them in its device's record
// (src/core/cuda/device_error.h) and the backend raises them at the host's next synchronisation,
// with the message the CPU kernel would have thrown at once. Host code (fmt builds the text).
#include <cstdint>
#include <string>

#include "src/core/cuda/device_error.h"
#include "wallfacer/core/stream.h"

namespace wf::kernels::cuda {

// What a kernel needs to report: the record of the stream's device and the message's id.
struct DataError {
  detail::DeviceErrorRecord* record = nullptr;
  int message = 0;
};

// `text` has {0} (where: the row, token or sample) and {1} (the offending value) and no other
// braces; host values (vocab, `what`) are already formatted into it. Its id is
// register_device_error_message's: the same for the same text, so building it per call is cheap.
DataError data_error(const Stream& stream, const std::string& text);

// kernels/cpu/cross_entropy.cpp's checked_target_count message for a target outside [0, vocab)
// that is not ignore_index (row {0}, target {1}): the cross-entropy entries and count_targets.
DataError bad_target_error(const Stream& stream, const char* what, std::int64_t vocab, std::int64_t ignore_index);

}  // namespace wf::kernels::cuda
