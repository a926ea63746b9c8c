#include "wallfacer/core/shape.h"

#include "wallfacer/core/error.h"

namespace wf {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto e : shape) {
    WF_CHECK(e >= 0, "negative extent in shape {}", shape_str(shape));
    n *= e;
  }
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  WF_CHECK(d >= 0 && d < ndim, "dimension {} is out of range for a tensor with {} dimensions", dim, ndim);
  return d;
}

}  // namespace wf
