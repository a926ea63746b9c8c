#pragma once
// The CUDA device backend's own kernels (src/core/cuda/convert.cu): dtype conversion and fill.
// Free of fmt and of the other wallfacer headers, so that nvcc compiles the .cu that defines them.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace wf::detail {

// The element types, in wf::DType's order (cuda_backend.cpp maps one onto the other).
enum class CudaElement : int { f32, f64, bf16, f16, i32, i64, u8 };

// n (> 0) elements of src converted to dst_type with exactly the CPU's rounding
// (src/core/host_copy.cpp, wallfacer/core/dtype.h): through double, bf16 and f16 rounded to
// nearest-even via a round-to-odd float, integers saturated (NaN to 0), NaN kept a NaN.
// src_type != dst_type; src and dst do not overlap. Queued on `stream`.
void launch_convert(const void* src, CudaElement src_type, void* dst, CudaElement dst_type, std::int64_t n,
                    cudaStream_t stream);

// n (> 0) elements of element_bytes (1, 2, 4 or 8) bytes each set to the low bytes of `bits`.
void launch_fill(void* dst, int element_bytes, std::uint64_t bits, std::int64_t n, cudaStream_t stream);

}  // namespace wf::detail
