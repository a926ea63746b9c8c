#pragma once
// Error checks for CUDA runtime and library calls. Free of fmt and of the other wallfacer headers,
// so that .cu files (compiled by nvcc) include it too; the message is built and thrown as a
// wf::Error in cuda_check.cpp.
#include <cuda_runtime_api.h>

namespace wf::detail {

// Throws wf::Error: "<what> failed at <file>:<line>: <CUDA's name and message for status>".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line);
// The same for a library status (cuBLAS, cuDNN) whose name the caller gives.
[[noreturn]] void throw_library_error(const char* library, int status, const char* status_name, const char* what,
                                      const char* file, int line);

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, what, file, line);
}

}  // namespace wf::detail

// WF_CUDA_CHECK(cudaMemcpyAsync(...)): wf::Error naming the call and the CUDA error.
#define WF_CUDA_CHECK(call) ::wf::detail::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported at once, naming the kernel
// (an error while the kernel runs surfaces at the stream's next synchronisation).
#define WF_CUDA_CHECK_LAUNCH(kernel_name) ::wf::detail::check_cuda(cudaGetLastError(), kernel_name, __FILE__, __LINE__)
