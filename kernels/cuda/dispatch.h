#pragma once
// Host-side helpers of the CUDA kernel entries (kernels/cuda/*.cpp): the native stream of a
// wallfacer Stream, and the choice of a launcher's element type from a DType.
#include <cuda_runtime_api.h>

#include "src/core/cuda/cuda_device.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stream.h"

namespace wf::kernels::cuda {

// The cudaStream_t to launch on, with the stream's device made current.
inline cudaStream_t native(const Stream& stream) { return detail::cuda_stream(stream); }

// Calls f(float{}) for f32 and f(double{}) for f64: the element types of the floating kernels
// (backend.h: the ops widen bf16 and f16 to f32 around them). wf::Error naming `what` otherwise.
template <class F>
void dispatch_floating(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return;
    case DType::f64: f(double{}); return;
    default: WF_FAIL("{} (cuda): no kernel for dtype {} (f32 or f64; the ops widen bf16 and f16 to f32)", what, dtype_name(dtype));
  }
}

// The entries' void pointers as the launcher's element type: read-only inputs, and outputs.
template <class T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}
template <class T>
T* io(void* p) {
  return static_cast<T*>(p);
}

}  // namespace wf::kernels::cuda
