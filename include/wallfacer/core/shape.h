#pragma once
// Shapes are plain vectors of extents, outermost first; storage is always row-major.
#include <cstdint>
#include <string>
#include <vector>

namespace wf {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
// Resolves a possibly negative dimension index against `ndim`; wf::Error when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim);

}  // namespace wf
