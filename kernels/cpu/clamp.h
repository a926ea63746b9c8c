#pragma once
// y = x clamped to [lo, hi] elementwise (std::clamp: NaN stays NaN), lo and hi rounded to T.
// y may alias x.
#include <cstdint>

namespace wf::kernels::cpu {

template <typename T>
void clamp(std::int64_t n, T lo, T hi, const T* x, T* y);

// ---- reference -------------------------------------------------------------------------------------
template <typename T>
void clamp_reference(std::int64_t n, T lo, T hi, const T* x, T* y);

}  // namespace wf::kernels::cpu
