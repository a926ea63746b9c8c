#pragma once
// Loops over independent elements or rows, split over OpenMP threads (static schedule) once they
// are large enough to pay for it. Each iteration must touch only its own element or row, so
// the results never depend on the thread count.
#include <cstdint>

namespace wf::kernels::cpu {

// Below ~32k elements a loop finishes in a few microseconds: waking threads would cost more.
inline constexpr std::int64_t kParallelElements = std::int64_t{1} << 15;

// f(i) for i in [0, n).
template <class F>
void parallel_for_each(std::int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

// f(r) for each row r of a [rows, cols] array.
template <class F>
void parallel_for_rows(std::int64_t rows, std::int64_t cols, F f) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) f(r);
}

// f(begin, end) for consecutive blocks of `block` elements covering [0, n) (the last block may
// be shorter): for SIMD loops, which want long contiguous runs rather than single elements.
template <class F>
void parallel_for_blocks(std::int64_t n, std::int64_t block, F f) {
  const std::int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (blocks > 1 && n > kParallelElements)
  for (std::int64_t b = 0; b < blocks; ++b) f(b * block, b + 1 < blocks ? (b + 1) * block : n);
}

}  // namespace wf::kernels::cpu
