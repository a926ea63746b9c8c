#include "wallfacer/nn/parameter_shard.h"

#include <fmt/format.h>

#include <utility>

#include "wallfacer/core/error.h"

namespace wf::nn {

std::int64_t ParameterShard::length() const {
  return is_sharded() ? global_shape[static_cast<std::size_t>(dim)] / parts : 0;
}

Shape ParameterShard::local_shape() const {
  Shape shape = global_shape;
  if (is_sharded()) shape[static_cast<std::size_t>(dim)] = length();
  return shape;
}

Shape ParameterShard::unpadded_shape() const {
  Shape shape = global_shape;
  if (is_sharded() && unpadded_length > 0) shape[static_cast<std::size_t>(dim)] = unpadded_length;
  return shape;
}

ParameterShard ParameterShard::replicated(Shape shape) {
  ParameterShard shard;
  shard.global_shape = std::move(shape);
  return shard;
}

ParameterShard ParameterShard::split(std::string group, const Shape& global_shape, int dim, int parts, int index) {
  const auto ndim = static_cast<int>(global_shape.size());
  WF_CHECK(dim >= -ndim && dim < ndim, "ParameterShard: dim {} is out of range for shape {}", dim,
           shape_str(global_shape));
  const int d = dim < 0 ? dim + ndim : dim;
  WF_CHECK(parts >= 1 && index >= 0 && index < parts,
           "ParameterShard: slice {} of {} is not a valid slice (need 0 <= index < parts)", index, parts);
  WF_CHECK(global_shape[static_cast<std::size_t>(d)] % parts == 0,
           "ParameterShard: dim {} of shape {} has extent {}, which does not split into {} equal parts over group "
           "'{}'",
           d, shape_str(global_shape), global_shape[static_cast<std::size_t>(d)], parts, group);
  ParameterShard shard;
  shard.group = std::move(group);
  shard.dim = d;
  shard.parts = parts;
  shard.index = index;
  shard.global_shape = global_shape;
  return shard;
}

ParameterShard ParameterShard::split_padded(std::string group, const Shape& global_shape, int dim, int parts,
                                            int index, std::int64_t unpadded_length) {
  ParameterShard shard = split(std::move(group), global_shape, dim, parts, index);
  const std::int64_t extent = global_shape[static_cast<std::size_t>(shard.dim)];
  WF_CHECK(unpadded_length > 0 && unpadded_length <= extent,
           "ParameterShard: the real extent {} of dim {} must be in [1, {}] (the padded extent)", unpadded_length,
           shard.dim, extent);
  shard.unpadded_length = unpadded_length == extent ? 0 : unpadded_length;
  return shard;
}

std::string shard_str(const ParameterShard& shard) {
  const std::string partial = shard.partial_gradient_group.empty()
                                  ? std::string()
                                  : fmt::format(", gradient partial over {}", shard.partial_gradient_group);
  if (!shard.is_sharded()) return fmt::format("whole {}{}", shape_str(shard.global_shape), partial);
  return fmt::format("dim {} slice {}/{} of {}{} over {}{}", shard.dim, shard.index, shard.parts,
                     shape_str(shard.global_shape),
                     shard.unpadded_length > 0 ? fmt::format(" (padded from {})", shard.unpadded_length) : "",
                     shard.group, partial);
}

}  // namespace wf::nn
