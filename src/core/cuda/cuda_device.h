#pragma once
// The CUDA device backend's native handles, for the CUDA kernels (kernels/cuda) and the CUDA
// transports (comm): core's Stream is a device and a 64-bit handle; these turn it into the
// cudaStream_t it names. Host code only (not for .cu files: kernels take a cudaStream_t).
//
// Streams: handle 0 is the device's main stream, a non-blocking stream the backend creates on
// first use (not CUDA's legacy default stream, which would serialise with every other stream);
// any other handle is a cudaStream_t made by Stream::create. Memory is allocated and freed in the
// main stream's order (cudaMallocFromPoolAsync / cudaFreeAsync on a pool that keeps what is
// freed). The backend joins the thread's current stream to it: when that is another stream, the
// current stream waits for the main stream after an allocation, and the main stream waits for
// the current stream before a free. Work queued on any other stream that uses a tensor must be
// joined back into the main stream (an Event wait, as comm::Request::make_wait does) before that
// tensor is dropped.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "wallfacer/core/device.h"
#include "wallfacer/core/stream.h"

namespace wf {
class DeviceBackend;
}

namespace wf::detail {

// The CUDA device backend (src/core/cuda/cuda_backend.cpp), registered by core's registry in
// CUDA builds whether or not a GPU is visible: allocating without one fails naming the device.
DeviceBackend& cuda_device_backend();

// Makes device.index the calling thread's current CUDA device (cheap when it already is).
void cuda_set_device(Device device);
// The native stream `stream` names, with its device made current; wf::Error when the stream is
// not a CUDA stream or its device does not exist.
cudaStream_t cuda_stream(const Stream& stream);
// The number of visible CUDA devices; 0 when none (or no driver), never an error.
int cuda_device_count();
// Properties the kernels ask for: streaming multiprocessors, compute capability (major·10 + minor).
int cuda_multiprocessors(Device device);
int cuda_compute_capability(Device device);

// Device memory for kernels' own use (an index list, a reduction's partials) while the work
// queued on `stream` needs it: allocated on construction; on destruction released in stream
// order once the work queued on `stream` so far has run, whichever stream that is (the main
// stream waits for an event recorded on `stream` before the free). Never waits on the host.
class CudaScratch {
 public:
  CudaScratch(const Stream& stream, std::size_t nbytes);
  // The same, holding a copy of host_src's nbytes (queued on `stream`; host_src may be reused
  // as soon as the constructor returns).
  CudaScratch(const Stream& stream, const void* host_src, std::size_t nbytes);
  ~CudaScratch();
  CudaScratch(const CudaScratch&) = delete;
  CudaScratch& operator=(const CudaScratch&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t nbytes() const { return nbytes_; }

 private:
  Stream stream_;
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::size_t capacity_ = 0;
  bool from_graph_ = false;  // from a graph's pool: allocated while capturing (wallfacer/core/graph.h)
};

}  // namespace wf::detail
