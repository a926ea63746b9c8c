#include "wallfacer/core/shape.h"

#include <limits>

#include "wallfacer/core/error.h"

namespace wf {
namespace {

constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

// The product of the non-zero extents, or nullopt when it overflows. Negative extents are the
// caller's to reject first.
std::optional<std::int64_t> nonzero_product(const Shape& shape) {
  std::int64_t product = 1;
  for (const std::int64_t e : shape) {
    if (e == 0) continue;
    if (__builtin_mul_overflow(product, e, &product)) return std::nullopt;
  }
  return product;
}

bool has_zero(const Shape& shape) {
  for (const std::int64_t e : shape) {
    if (e == 0) return true;
  }
  return false;
}

}  // namespace

std::optional<std::int64_t> checked_numel(const Shape& shape) {
  for (const std::int64_t e : shape) {
    if (e < 0) return std::nullopt;
  }
  const std::optional<std::int64_t> product = nonzero_product(shape);
  if (!product) return std::nullopt;
  return has_zero(shape) ? 0 : *product;
}

std::int64_t shape_numel(const Shape& shape) {
  for (const std::int64_t e : shape) WF_CHECK(e >= 0, "negative extent in shape {}", shape_str(shape));
  const std::optional<std::int64_t> n = checked_numel(shape);
  // The message prints no product: the overflowed one would be a wrong number.
  WF_CHECK(n.has_value(), "shape {} has too many elements: the product of its extents exceeds {} (2^63 - 1)",
           shape_str(shape), kMaxInt64);
  return *n;
}

std::size_t shape_nbytes(const Shape& shape, std::size_t element_size) {
  const std::int64_t n = shape_numel(shape);
  const auto size = static_cast<std::int64_t>(element_size);
  WF_CHECK(size == 0 || n <= kMaxInt64 / size, "a tensor of shape {} with {}-byte elements would need more than {} bytes (2^63 - 1)",
           shape_str(shape), element_size, kMaxInt64);
  return static_cast<std::size_t>(n * size);
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  WF_CHECK(d >= 0 && d < ndim, "dimension {} is out of range for a tensor with {} dimensions", dim, ndim);
  return d;
}

}  // namespace wf
