// ParameterShard (which slice of a parameter a rank holds), its registration on Module, and
// init_slice / init_shard: a slice drawn alone is bit for bit the slice of the
// whole draw, along any dim.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "wallfacer/nn/init.h"
#include "wallfacer/nn/nn.h"
#include "wallfacer/ops/shape_ops.h"

using Catch::Contains;
using wf::Shape;
using wf::Tensor;
using namespace wf::nn;

namespace {

constexpr std::uint64_t kStream = 0x5eed;

// Bit-for-bit equality of two f32 tensors (shape too).
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<float>() == b.to_vector<float>();
}

// A module with a whole and a split parameter, and a child, for the registration tests.
struct Holder : Module {
  Holder() : Module(3) {
    whole = register_parameter("whole", Tensor::zeros({4}));
    split = register_parameter("split", Tensor::zeros({2, 3}), ParameterShard::split("tp", {8, 3}, 0, 4, 1));
    child = register_module("child", std::make_shared<Linear>(3, 2, true, child_seed("child")));
  }
  Tensor whole, split;
  std::shared_ptr<Linear> child;
};

}  // namespace

TEST_CASE("ParameterShard: slices, local shapes and the checks of split", "[nn][shard]") {
  const ParameterShard whole = ParameterShard::replicated({6, 4});
  CHECK_FALSE(whole.is_sharded());
  CHECK(whole.local_shape() == Shape{6, 4});
  CHECK(whole.start() == 0);
  CHECK(shard_str(whole) == "whole [6, 4]");

  const ParameterShard rows = ParameterShard::split("tp", {6, 4}, 0, 3, 2);
  CHECK(rows.is_sharded());
  CHECK(rows.length() == 2);
  CHECK(rows.start() == 4);
  CHECK(rows.local_shape() == Shape{2, 4});
  CHECK(shard_str(rows) == "dim 0 slice 2/3 of [6, 4] over tp");

  const ParameterShard columns = ParameterShard::split("tp", {6, 4}, -1, 2, 1);  // negative dim: from the end
  CHECK(columns.dim == 1);
  CHECK(columns.start() == 2);
  CHECK(columns.local_shape() == Shape{6, 2});

  CHECK_THROWS_WITH(ParameterShard::split("tp", {6, 4}, 1, 3, 0), Contains("does not split into 3 equal parts"));
  CHECK_THROWS_WITH(ParameterShard::split("tp", {6, 4}, 2, 2, 0), Contains("out of range"));
  CHECK_THROWS_WITH(ParameterShard::split("tp", {6, 4}, 0, 2, 2), Contains("not a valid slice"));
}

TEST_CASE("Module: parameters are whole by default; a shard is registered with its parameter", "[nn][shard]") {
  Holder m;
  CHECK_FALSE(m.parameter_shard("whole").is_sharded());
  CHECK(m.parameter_shard("whole").global_shape == Shape{4});
  CHECK(m.parameter_shard("split").global_shape == Shape{8, 3});
  CHECK(m.parameter_shard("split").index == 1);
  CHECK(m.parameter_shard("child.weight").global_shape == Shape{2, 3});
  CHECK_THROWS_WITH(m.parameter_shard("child.nothing"), Contains("no parameter 'child.nothing'"));
  CHECK_THROWS_WITH(m.parameter_shard("nobody.weight"), Contains("no parameter 'nobody.weight'"));

  // Same names, same order as named_parameters(), so the two zip.
  const auto params = m.named_parameters();
  const auto shards = m.named_parameter_shards();
  const auto unnamed = m.parameter_shards();
  REQUIRE(params.size() == shards.size());
  REQUIRE(unnamed.size() == shards.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].first == shards[i].first);
    CHECK(params[i].second.shape() == shards[i].second.local_shape());
    CHECK(shard_str(unnamed[i]) == shard_str(shards[i].second));
  }

  Module other(1);
  CHECK_THROWS_WITH(other.register_parameter("w", Tensor::zeros({3, 3}), ParameterShard::split("tp", {8, 3}, 0, 4, 0)),
                    Contains("has shape [3, 3] but its shard (dim 0 slice 0/4 of [8, 3] over tp) holds [2, 3]"));
}

TEST_CASE("init_slice: any slice along any dim is bit for bit the slice of the whole draw",
          "[nn][shard][init]") {
  struct Case {
    Shape shape;
    std::int64_t dim, start, length;
  };
  const Case cases[] = {
      {{12, 8}, 0, 4, 4},      // rows: one contiguous run of the stream
      {{12, 8}, 1, 2, 3},      // columns: one strided run per row
      {{12, 8}, -1, 6, 2},     // the last columns, by a negative dim
      {{12, 8}, 1, 0, 8},      // all columns
      {{3, 4, 5}, 1, 1, 2},    // a middle dim of a 3-D tensor
      {{3, 4, 5}, 2, 3, 2},    // the last dim of a 3-D tensor
      {{10}, 0, 7, 3},         // a vector (a bias)
      {{12, 8}, 0, 5, 0},      // empty
  };
  for (const Case& c : cases) {
    INFO(wf::shape_str(c.shape) << " dim " << c.dim << " [" << c.start << ", " << c.start + c.length << ")");
    const Tensor whole = normal_init(c.shape, kStream, 0.02);
    const Tensor slice = init_slice(c.shape, c.dim, c.start, c.length, kStream, 0.02);
    CHECK(same_bits(slice, wf::narrow(whole, c.dim, c.start, c.length)));
  }
  CHECK_THROWS_WITH(init_slice({12, 8}, 1, 6, 3, kStream, 0.02), Contains("not within dim 1"));
  CHECK_THROWS_WITH(init_slice({12, 8}, 2, 0, 1, kStream, 0.02), Contains("out of range"));
}

TEST_CASE("init_shard: the ranks' shards put together are the whole draw", "[nn][shard][init]") {
  const Shape shape{12, 6};
  const Tensor whole = normal_init(shape, kStream, 0.5);
  CHECK(same_bits(init_shard(ParameterShard::replicated(shape), kStream, 0.5), whole));
  for (int dim = 0; dim < 2; ++dim) {
    for (int parts : {1, 2, 3}) {
      std::vector<Tensor> pieces;
      for (int r = 0; r < parts; ++r)
        pieces.push_back(init_shard(ParameterShard::split("tp", shape, dim, parts, r), kStream, 0.5));
      CHECK(same_bits(wf::cat(pieces, dim), whole));
    }
  }
}

TEST_CASE("Linear: a whole layer's parameters are registered as whole", "[nn][shard]") {
  Linear layer(LinearOptions{.in_features = 3, .out_features = 5, .seed = 9});
  CHECK(layer.parameter_shard("weight").global_shape == Shape{5, 3});
  CHECK_FALSE(layer.parameter_shard("weight").is_sharded());
  CHECK(layer.parameter_shard("bias").global_shape == Shape{5});
  // The weight is still init_normal's draw (the shard path for a whole tensor changes nothing).
  CHECK(same_bits(layer.weight().detach(), layer.init_normal("weight", {5, 3}, 0.02)));
}
