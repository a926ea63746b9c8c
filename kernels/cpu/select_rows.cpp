#include "kernels/cpu/select_rows.h"

#include <cstring>

#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

void check_position(std::int64_t p, std::int64_t rows) {
  WF_CHECK(p >= 0 && p < rows, "select_rows: position {} is outside the {} rows", p, rows);
}

}  // namespace

void select_rows(std::size_t elem_size, std::int64_t outer, std::int64_t rows, std::int64_t row_elems, const void* x,
                 std::int64_t n, const std::int64_t* positions, void* out) {
  const std::size_t row = static_cast<std::size_t>(row_elems) * elem_size;
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(out);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = positions[i];
    check_position(p, rows);
    for (std::int64_t b = 0; b < outer; ++b) {
      std::memcpy(dst + static_cast<std::size_t>(b * n + i) * row, src + static_cast<std::size_t>(b * rows + p) * row,
                  row);
    }
  }
}

void select_rows_reference(std::size_t elem_size, std::int64_t outer, std::int64_t rows, std::int64_t row_elems,
                           const void* x, std::int64_t n, const std::int64_t* positions, void* out) {
  const auto* src = static_cast<const unsigned char*>(x);
  auto* dst = static_cast<unsigned char*>(out);
  const auto bytes = static_cast<std::int64_t>(elem_size);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < n; ++i) {
      check_position(positions[i], rows);
      for (std::int64_t e = 0; e < row_elems * bytes; ++e) {
        dst[((o * n + i) * row_elems) * bytes + e] = src[((o * rows + positions[i]) * row_elems) * bytes + e];
      }
    }
  }
}

}  // namespace wf::kernels::cpu
