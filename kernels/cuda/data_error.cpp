#include "kernels/cuda/data_error.h"

#include <map>
#include <mutex>

namespace wf::kernels::cuda {

DataError data_error(const Stream& stream, const std::string& text) {
  static std::mutex mutex;
  static auto* ids = new std::map<std::string, int>();  // never destroyed: kernels may report at exit
  int message = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = ids->find(text);
    if (it == ids->end()) it = ids->emplace(text, detail::register_device_error_message(text.c_str())).first;
    message = it->second;
  }
  return {detail::device_error_record(stream.device().index), message};
}

}  // namespace wf::kernels::cuda
