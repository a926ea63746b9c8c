#include "src/core/cuda/cuda_check.h"

#include "wallfacer/core/error.h"

namespace wf::detail {

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error is reported here once, not again by the next call
  WF_FAIL("{} failed at {}:{}: {} ({})", what, file, line, cudaGetErrorName(status), cudaGetErrorString(status));
}

void throw_library_error(const char* library, int status, const char* status_name, const char* what,
                         const char* file, int line) {
  WF_FAIL("{} failed at {}:{}: {} status {} ({})", what, file, line, library, status, status_name);
}

}  // namespace wf::detail
