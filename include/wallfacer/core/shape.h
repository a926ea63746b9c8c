#pragma once
// Shapes are plain vectors of extents, outermost first; storage is always row-major.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wf {

using Shape = std::vector<std::int64_t>;

// The number of elements. wf::Error naming the shape for a negative extent, or when the product
// of the non-zero extents does not fit in int64: then no partial product of a tensor's shape
// (the outer/inner sizes the ops compute) can overflow either, even for a tensor with a 0 extent.
std::int64_t shape_numel(const Shape& shape);
// As shape_numel, but nullopt instead of an error (for callers that name the shape themselves).
std::optional<std::int64_t> checked_numel(const Shape& shape);
// Bytes of a tensor of `shape` with elements of `element_size` bytes. wf::Error naming the shape
// when they would exceed INT64_MAX (byte counters and offsets are int64).
std::size_t shape_nbytes(const Shape& shape, std::size_t element_size);

std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
// Resolves a possibly negative dimension index against `ndim`; wf::Error when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim);

}  // namespace wf
