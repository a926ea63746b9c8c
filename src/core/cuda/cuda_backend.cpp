// The CUDA device backend (docs/devices.md, "The CUDA device backend"): memory from
// cuda_memory.cpp, copies with cudaMemcpyAsync, conversions and fills with convert.cu's kernels,
// streams and events as CUDA's, each host wait followed by the check for errors kernels recorded
// (device_error.h). Nothing here runs before a CUDA device is first used.
#include <cstring>
#include <memory>

#include "src/core/cuda/convert.h"
#include "src/core/cuda/cuda_check.h"
#include "src/core/cuda/cuda_device.h"
#include "src/core/cuda/cuda_devices.h"
#include "src/core/cuda/cuda_memory.h"
#include "src/core/cuda/device_error.h"
#include "src/core/graph_capture.h"
#include "wallfacer/core/device_backend.h"
#include "wallfacer/core/error.h"

namespace wf::detail {
namespace {

CudaElement element_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return CudaElement::f32;
    case DType::f64: return CudaElement::f64;
    case DType::bf16: return CudaElement::bf16;
    case DType::f16: return CudaElement::f16;
    case DType::i32: return CudaElement::i32;
    case DType::i64: return CudaElement::i64;
    case DType::u8: return CudaElement::u8;
  }
  WF_FAIL("cuda: unknown dtype {}", static_cast<int>(dtype));
}

// What Event::handle() points to: the event and the device whose errors a wait on it raises.
struct CudaEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

class CudaBackend final : public DeviceBackend {
 public:
  // ---- memory ----------------------------------------------------------------------------------
  // The thread's current stream is the one that uses the block (ops queue their work on it).
  MemoryBlock allocate(Device device, std::size_t nbytes) override {
    return cuda_allocate(device, nbytes, Stream::current(device));
  }
  void release(Device device, MemoryBlock block) override { cuda_release(device, block, Stream::current(device)); }
  CacheStats cache_stats() override { return cuda_cache_stats(); }
  void empty_cache() override { cuda_empty_cache(); }
  std::size_t cache_limit() override { return static_cast<std::size_t>(cuda_pool_release_threshold()); }
  void set_cache_limit(std::size_t bytes) override { set_cuda_pool_release_threshold(bytes); }

  MemoryBlock allocate_pinned(std::size_t nbytes) override { return cuda_allocate_pinned(nbytes); }
  void release_pinned(MemoryBlock block) override { cuda_release_pinned(block); }

  // ---- data movement ----------------------------------------------------------------------------
  // From pageable host memory the copy is staged before cudaMemcpyAsync returns, so the caller
  // may reuse host_src at once (as docs/devices.md promises of every backend). From a pinned
  // block the stream reads it when it runs the copy: the pinned cache keeps the block from being
  // reused (or freed) before then, whenever its owner releases it.
  // While a graph is captured on the stream, the bytes are kept in pinned memory the graph owns,
  // which every replay copies from (wallfacer/core/graph.h: host data is baked in).
  void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, const Stream& stream) override {
    if (nbytes == 0) return;
    const cudaStream_t native = cuda_stream(stream);
    if (capturing(stream.device())) {
      WF_CUDA_CHECK(cudaMemcpyAsync(dst, capture_keep_host_bytes(stream.device(), host_src, nbytes), nbytes,
                                    cudaMemcpyHostToDevice, native));
      return;
    }
    WF_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, native));
    cuda_pinned_used_by(host_src, nbytes, stream, native);
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, const Stream& stream) override {
    if (nbytes == 0) return;
    const cudaStream_t native = cuda_stream(stream);
    WF_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, native));
    cuda_pinned_used_by(host_dst, nbytes, stream, native);
  }
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n,
               const Stream& stream) override {
    if (n <= 0) return;
    const cudaStream_t native = cuda_stream(stream);
    if (src_dtype == dst_dtype) {
      WF_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * dtype_size(src_dtype),
                                    cudaMemcpyDeviceToDevice, native));
      return;
    }
    launch_convert(src, element_of(src_dtype), dst, element_of(dst_dtype), n, native);
  }
  void fill(void* dst, DType dtype, std::int64_t n, double value, const Stream& stream) override {
    if (n <= 0) return;
    const cudaStream_t native = cuda_stream(stream);
    // The element's bytes as the CPU makes them (from_double), computed here once.
    std::uint64_t bits = 0;
    dispatch_all(dtype, [&](auto tag) {
      const auto v = from_double<decltype(tag)>(value);
      std::memcpy(&bits, &v, sizeof v);
    });
    const std::size_t element = dtype_size(dtype);
    if (bits == 0) {
      WF_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(n) * element, native));
      return;
    }
    launch_fill(dst, static_cast<int>(element), bits, n, native);
  }

  // ---- graphs -----------------------------------------------------------------------------------
  // Relaxed mode: the capturing thread may still call what CUDA deems unsafe during a capture
  // (cudaMalloc for the graph's pool); the host waits a graph cannot hold are refused by core
  // before they reach CUDA (src/core/graph_capture.h).
  bool supports_graphs() override { return true; }
  void begin_capture(const Stream& stream) override {
    WF_CUDA_CHECK(cudaStreamBeginCapture(cuda_stream(stream), cudaStreamCaptureModeRelaxed));
  }
  std::shared_ptr<void> end_capture(const Stream& stream) override {
    cudaGraph_t graph = nullptr;
    WF_CUDA_CHECK(cudaStreamEndCapture(cuda_stream(stream), &graph));
    cudaGraphExec_t executable = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&executable, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph is a copy
    check_cuda(status, "cudaGraphInstantiate", __FILE__, __LINE__);
    return std::shared_ptr<void>(executable, [](void* p) {
      if (cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)) != cudaSuccess) cudaGetLastError();  // at exit
    });
  }
  void abort_capture(const Stream& stream) noexcept override {
    try {
      cudaGraph_t graph = nullptr;
      // A capture that an illegal call invalidated ends with an error and no graph: both cleared.
      if (cudaStreamEndCapture(cuda_stream(stream), &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
    } catch (...) {
    }
  }
  void replay(const std::shared_ptr<void>& graph, const Stream& stream) override {
    WF_CHECK(graph != nullptr, "cuda: replay of an empty graph");
    WF_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), cuda_stream(stream)));
  }
  // cudaMalloc, not the stream-ordered pool: the graph's replays run on their own stream for as
  // long as the graph lives, and cudaFree waits for them.
  MemoryBlock allocate_graph_memory(Device device, std::size_t nbytes) override {
    cuda_set_device(device);
    const std::size_t size = (nbytes + 255) / 256 * 256;
    void* data = nullptr;
    if (const cudaError_t status = cudaMalloc(&data, size); status != cudaSuccess) {
      cudaGetLastError();
      WF_FAIL("cuda:{}: out of memory allocating {} bytes for a captured graph's pool ({}); turn train.cuda_graph "
              "off, or need less memory (a smaller train.micro_batch_size, model.checkpoint_attention: true)",
              device.index, nbytes, cudaGetErrorString(status));
    }
    return {data, size};
  }
  void release_graph_memory(Device device, MemoryBlock block) override {
    try {
      cuda_set_device(device);
    } catch (...) {
      return;  // at exit: the runtime may be gone, with its memory
    }
    if (cudaFree(block.data) != cudaSuccess) cudaGetLastError();
  }

  // ---- streams and events ------------------------------------------------------------------------
  Stream create_stream(Device device) override {
    cuda_device_state(device);  // checks the device and makes it current
    cudaStream_t stream = nullptr;
    // Kept for the process (Stream::create's promise): never destroyed.
    WF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return Stream(device, reinterpret_cast<std::uint64_t>(stream));
  }
  void synchronize(const Stream& stream) override {
    WF_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)));
    raise_device_error(stream.device().index);
  }
  bool query(const Stream& stream) override {
    return completed(cudaStreamQuery(cuda_stream(stream)), "cudaStreamQuery");
  }
  void synchronize_device(Device device) override {
    cuda_device_state(device);
    WF_CUDA_CHECK(cudaDeviceSynchronize());
    raise_device_error(device.index);
  }

  std::shared_ptr<void> create_event(Device device) override {
    cuda_device_state(device);
    auto* event = new CudaEvent{nullptr, device.index};
    if (const cudaError_t status = cudaEventCreateWithFlags(&event->event, cudaEventDisableTiming);
        status != cudaSuccess) {
      delete event;
      throw_cuda_error(status, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    return std::shared_ptr<void>(event, [](void* p) {
      auto* e = static_cast<CudaEvent*>(p);
      if (cudaEventDestroy(e->event) != cudaSuccess) cudaGetLastError();  // at exit: CUDA may be gone already
      delete e;
    });
  }
  void record(const std::shared_ptr<void>& event, const Stream& stream) override {
    WF_CUDA_CHECK(cudaEventRecord(native(event.get()).event, cuda_stream(stream)));
  }
  void wait(const Stream& stream, const std::shared_ptr<void>& event) override {
    WF_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), native(event.get()).event, 0));
  }
  void synchronize_event(void* event) override {
    const CudaEvent& e = native(event);
    WF_CUDA_CHECK(cudaEventSynchronize(e.event));
    raise_device_error(e.device);
  }
  bool query_event(void* event) override { return completed(cudaEventQuery(native(event).event), "cudaEventQuery"); }

 private:
  static const CudaEvent& native(void* event) {
    WF_CHECK(event != nullptr, "cuda: an event without a CUDA event behind it");
    return *static_cast<const CudaEvent*>(event);
  }
  // A query's answer: cudaErrorNotReady is "not yet", any other error is thrown.
  static bool completed(cudaError_t status, const char* what) {
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: leave nothing for the next check to find
      return false;
    }
    check_cuda(status, what, __FILE__, __LINE__);
    return true;
  }
};

}  // namespace

DeviceBackend& cuda_device_backend() {
  static auto* backend = new CudaBackend();  // never destroyed; makes no CUDA call until used
  return *backend;
}

}  // namespace wf::detail
