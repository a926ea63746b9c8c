#include "kernels/cpu/clamp.h"

#include <algorithm>

namespace wf::kernels::cpu {

template <typename T>
void clamp(std::int64_t n, T lo, T hi, const T* x, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::clamp(x[i], lo, hi);
}

template <typename T>
void clamp_reference(std::int64_t n, T lo, T hi, const T* x, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] < lo ? lo : (hi < x[i] ? hi : x[i]);
}

#define WF_INSTANTIATE_CLAMP(T)                                       \
  template void clamp<T>(std::int64_t, T, T, const T*, T*);           \
  template void clamp_reference<T>(std::int64_t, T, T, const T*, T*);
WF_INSTANTIATE_CLAMP(float)
WF_INSTANTIATE_CLAMP(double)
#undef WF_INSTANTIATE_CLAMP

}  // namespace wf::kernels::cpu
