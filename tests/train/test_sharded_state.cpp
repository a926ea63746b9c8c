// Whole tensors from shards and back (train/sharded_state.h) in one process: a split shard's
// slice of a padded whole tensor, and the messages of a checkpoint's optimizer state that does
// not fit the model. The gathers over real tp groups are tests/dist/test_train_parity_tp.cpp's.
#include <catch2/catch.hpp>

#include "wallfacer/comm/runtime.h"
#include "wallfacer/core/error.h"
#include "wallfacer/nn/linear.h"
#include "wallfacer/train/optimizer.h"
#include "wallfacer/train/sharded_state.h"

using wf::Shape;
using wf::Tensor;

TEST_CASE("local_slice cuts a shard out of the whole tensor, padding rows zeros", "[train][sharded_state]") {
  const Tensor whole = Tensor::arange(0.0, 15.0, 1.0, wf::DType::f32).view({5, 3});  // 5 rows, padded to 6
  for (int index = 0; index < 2; ++index) {
    const auto shard = wf::nn::ParameterShard::split_padded("tp", {6, 3}, 0, 2, index, 5);
    const Tensor mine = wf::train::local_slice(whole, shard, "table");
    REQUIRE(mine.shape() == Shape{3, 3});
    const auto v = mine.to_vector<float>();
    for (std::int64_t k = 0; k < 9; ++k) {
      const std::int64_t flat = index * 9 + k;
      CHECK(v[static_cast<std::size_t>(k)] == (flat < 15 ? static_cast<float>(flat) : 0.0f));
    }
  }
  const auto columns = wf::nn::ParameterShard::split("tp", {5, 3}, 1, 3, 2);
  CHECK(wf::train::local_slice(whole, columns, "w").to_vector<float>() == std::vector<float>{2, 5, 8, 11, 14});
  CHECK_THROWS_WITH(wf::train::local_slice(Tensor::zeros({4, 3}), columns, "blocks.0.w"),
                    Catch::Contains("'blocks.0.w' has shape [4, 3] in the checkpoint, but the model's parameter is "
                                    "[5, 3]"));
}

TEST_CASE("load_whole_state names the parameters whose optimizer state does not fit", "[train][sharded_state]") {
  wf::comm::Runtime::init();  // a world of one: no mpirun needed
  wf::comm::CommGrid grid(wf::comm::ProcessGrid(wf::comm::ParallelConfig{}, 1, 0));
  wf::nn::Linear layer(wf::nn::LinearOptions{.in_features = 3, .out_features = 2, .seed = 1});
  wf::train::AdamW optimizer(layer.parameters());
  wf::train::WholeState state = wf::train::gather_whole_state(layer, optimizer, grid);
  CHECK(state.optimizer.size() == 0);  // no step yet
  CHECK_NOTHROW(wf::train::load_whole_state(state, layer, optimizer));

  SECTION("an unknown parameter and an unknown field") {
    state.optimizer.insert("head.weight.exp_avg", Tensor::zeros({2, 3}));
    state.optimizer.insert("weight.momentum", Tensor::zeros({2, 3}));
    CHECK_THROWS_WITH(wf::train::load_whole_state(state, layer, optimizer),
                      Catch::Contains("'head.weight.exp_avg' names no parameter of the model") &&
                          Catch::Contains("'weight.momentum' is not an AdamW field (step, exp_avg, exp_avg_sq, ema)"));
  }
  SECTION("a parameter with only some of its fields") {
    state.optimizer.insert("bias.exp_avg", Tensor::zeros({2}));
    CHECK_THROWS_WITH(wf::train::load_whole_state(state, layer, optimizer),
                      Catch::Contains("'bias' has only 1 of its 3 AdamW fields"));
  }
}
