#pragma once
// Row selection for position-indexed tables and inputs (nn/sincos_position.h select_rows): x is
// [outer, rows, row_elems] and out [outer, n, row_elems] with out[o, i] = x[o, positions[i]].
// Any dtype (only the element size matters). A position outside [0, rows) is an error.
#include <cstddef>
#include <cstdint>

namespace wf::kernels::cpu {

void select_rows(std::size_t elem_size, std::int64_t outer, std::int64_t rows, std::int64_t row_elems, const void* x,
                 std::int64_t n, const std::int64_t* positions, void* out);

// ---- reference: element by element --------------------------------------------------------------
void select_rows_reference(std::size_t elem_size, std::int64_t outer, std::int64_t rows, std::int64_t row_elems,
                           const void* x, std::int64_t n, const std::int64_t* positions, void* out);

}  // namespace wf::kernels::cpu
