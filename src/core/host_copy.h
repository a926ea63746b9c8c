#pragma once
// Copies, dtype conversions and fills of host memory: Tensor::copy_ and fill_ on the CPU, and
// the test device's own copies (which run on host memory inside its access scope).
#include <cstdint>

#include "wallfacer/core/dtype.h"

namespace wf::detail {

// n elements from src (src_dtype) to dst (dst_dtype): a plain copy for equal dtypes, else
// through double (exact for f64 and for i64 in its range), bf16/f16 rounding to nearest-even.
// src and dst must not overlap.
void host_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);
// n elements of dtype set to value (converted as from_double<T> does).
void host_fill(void* dst, DType dtype, std::int64_t n, double value);

}  // namespace wf::detail
