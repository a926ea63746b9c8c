#include "src/core/host_copy.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/parallel_for.h"

namespace wf::detail {
namespace {

// Copies and fills are memory-bound: large ones are split over the OpenMP threads in blocks of
// this many elements (one thread leaves half of the bandwidth unused; gradients of GPT-2's
// embedding are 154 MB).
constexpr std::int64_t kCopyBlock = std::int64_t{1} << 16;

// Converts elements [b, e) from S to D. A function template rather than `if constexpr` inside the
// parallel lambda below: clang 14 does not discard the untaken branches of a non-generic lambda
// nested in a generic one.
template <typename S, typename D>
void convert_range(const S* in, D* out, std::int64_t b, std::int64_t e) {
  if constexpr (std::is_same_v<S, D>) {
    std::copy(in + b, in + e, out + b);
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>) {
    // Mixed precision converts every weight each step: straight bit arithmetic, which the
    // compiler vectorises, instead of the generic detour through double (same result: a float
    // is exact in double).
    for (std::int64_t i = b; i < e; ++i) out[i] = float_to_bf16(in[i]);
  } else if constexpr (std::is_same_v<S, bf16> && std::is_same_v<D, float>) {
    for (std::int64_t i = b; i < e; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    for (std::int64_t i = b; i < e; ++i) out[i] = from_double<D>(to_double(in[i]));
  }
}

}  // namespace

void host_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n) {
  dispatch_all(src_dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_all(dst_dtype, [&](auto d) {
      using D = decltype(d);
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      kernels::cpu::parallel_for_blocks(
          n, kCopyBlock, [=](std::int64_t b, std::int64_t e) { convert_range(in, out, b, e); });
    });
  });
}

void host_fill(void* dst, DType dtype, std::int64_t n, double value) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(dst);
    const T v = from_double<T>(value);
    kernels::cpu::parallel_for_blocks(n, kCopyBlock,
                                      [=](std::int64_t b, std::int64_t e) { std::fill(out + b, out + e, v); });
  });
}

}  // namespace wf::detail
