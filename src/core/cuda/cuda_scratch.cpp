// detail::CudaScratch (cuda_device.h): kernels' own device memory, freed in stream order.
#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/cuda/cuda_memory.h"
#include "src/core/graph_capture.h"

namespace wf::detail {

CudaScratch::CudaScratch(const Stream& stream, std::size_t nbytes) : stream_(stream), nbytes_(nbytes) {
  if (nbytes == 0) return;
  // While a graph is captured on this thread, from the graph's pool (its replays reuse it).
  if (const std::optional<MemoryBlock> captured = capture_allocate(stream.device(), nbytes)) {
    data_ = captured->data;
    capacity_ = captured->size;
    from_graph_ = true;
    return;
  }
  // Allocated in the main stream's order; cuda_allocate makes `stream` wait for that point.
  const MemoryBlock block = cuda_allocate(stream.device(), nbytes, stream);
  data_ = block.data;
  capacity_ = block.size;
}

CudaScratch::CudaScratch(const Stream& stream, const void* host_src, std::size_t nbytes)
    : CudaScratch(stream, nbytes) {
  if (nbytes == 0) return;
  if (from_graph_) {  // the bytes kept for every replay (wallfacer/core/graph.h)
    WF_CUDA_CHECK(cudaMemcpyAsync(data_, capture_keep_host_bytes(stream.device(), host_src, nbytes), nbytes,
                                  cudaMemcpyHostToDevice, cuda_stream(stream_)));
    return;
  }
  // cudaMemcpyAsync from pageable host memory returns once the bytes are staged, so host_src may
  // be reused at once. From page-locked memory it would read host_src later, when the stream
  // gets to it: such a source is copied to pageable memory first.
  cudaPointerAttributes attributes{};
  const bool pinned =
      cudaPointerGetAttributes(&attributes, host_src) == cudaSuccess && attributes.type == cudaMemoryTypeHost;
  cudaGetLastError();  // an unknown pointer is not an error worth keeping
  std::vector<unsigned char> pageable;
  if (pinned) {
    const auto* bytes = static_cast<const unsigned char*>(host_src);
    pageable.assign(bytes, bytes + nbytes);
    host_src = pageable.data();
  }
  WF_CUDA_CHECK(cudaMemcpyAsync(data_, host_src, nbytes, cudaMemcpyHostToDevice, cuda_stream(stream_)));
}

CudaScratch::~CudaScratch() {
  // After the work queued on stream_ so far (which may still use the memory), in the main
  // stream's order: cuda_release records an event on stream_ for the main stream to wait on.
  if (data_ == nullptr) return;
  // A block of a graph's pool returns to it; one freed while capturing stays with the graph.
  if (capture_release(stream_.device(), {data_, capacity_})) return;
  cuda_release(stream_.device(), {data_, capacity_}, stream_);
}

}  // namespace wf::detail
