#include "kernels/cuda/data_error.h"

#include <fmt/format.h>

namespace wf::kernels::cuda {

DataError data_error(const Stream& stream, const std::string& text) {
  return {detail::device_error_record(stream.device().index), detail::register_device_error_message(text.c_str())};
}

DataError bad_target_error(const Stream& stream, const char* what, std::int64_t vocab, std::int64_t ignore_index) {
  return data_error(stream, fmt::format("{}: target {{1}} of row {{0}} is outside the vocabulary [0, {}) and is not "
                                        "ignore_index ({}); fix the labels or mark padding with ignore_index",
                                        what, vocab, ignore_index));
}

}  // namespace wf::kernels::cuda
